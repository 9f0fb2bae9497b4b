"""Measuring builds on devices: bench, fleet fan-out, sweeps, load curves."""
