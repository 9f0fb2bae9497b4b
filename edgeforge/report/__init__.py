"""Reports over bench results: compare two runs, gate a set of runs, render Markdown/HTML/JSON/JUnit.

Entry points (import them from their modules; scipy and matplotlib load only there):

- :func:`edgeforge.report.compare.compare` — is run B faster/slower than run A, or noise?
- :func:`edgeforge.report.gates.evaluate_gates` and :func:`edgeforge.report.junit.write_junit`
- :func:`edgeforge.report.report.write_report` — report.md, report.html, summary.json
- :mod:`edgeforge.cli.report` — the ``report``, ``compare`` and ``gate`` verbs; the gate flags
  other verbs reuse are in :mod:`edgeforge.cli._common`.

Result files are :class:`edgeforge.results.schema.BenchResult` documents (``edgeforge.bench/1``);
:mod:`.load` reads them for reports (complete runs only).
"""
from __future__ import annotations

from .load import load_result, load_results, validate_result

__all__ = ["load_result", "load_results", "validate_result"]
