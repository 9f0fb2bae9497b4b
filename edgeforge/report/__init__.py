"""Reports over bench results: compare two runs, gate a set of runs, render Markdown/HTML/JSON/JUnit.

Entry points (import them from their modules; scipy and matplotlib load only there):

- :func:`edgeforge.report.compare.compare` — is run B faster/slower than run A, or noise?
- :func:`edgeforge.report.gates.evaluate_gates` and :func:`edgeforge.report.junit.write_junit`
- :func:`edgeforge.report.report.write_report` — report.md, report.html, summary.json
- :mod:`edgeforge.report.cli` — the ``report``, ``compare`` and ``gate`` verbs, and the gate flags
  (``add_gate_arguments``, ``apply_gates``) other verbs reuse.

Result files (schema ``edgeforge.bench/1``) are read by this package's own loader, :mod:`.load`.
"""
from __future__ import annotations

from .load import BENCH_SCHEMA, load_result, load_results, validate_result

__all__ = ["BENCH_SCHEMA", "load_result", "load_results", "validate_result"]
