"""Quantization helpers: a fast, semantics-preserving KL calibration search for Paddle PTQ."""
