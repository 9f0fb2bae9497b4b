"""Reports over bench results: compare two runs, gate a set of runs, render Markdown/HTML/JSON/JUnit.

Reads result files (schema ``edgeforge.bench/1``) with its own tolerant loader (:mod:`.load`),
so it does not depend on how ``edgeforge bench`` writes them beyond that schema.
Heavy imports (scipy, matplotlib) happen inside the functions that need them.
"""
from __future__ import annotations

from .load import BENCH_SCHEMA, load_result, load_results, validate_result

__all__ = ["BENCH_SCHEMA", "load_result", "load_results", "validate_result",
           "compare", "CompareResult", "evaluate_gates", "GateResult", "write_junit", "write_report"]


def __getattr__(name):  # lazy: `edgeforge --help` must not import scipy or matplotlib
    if name in ("compare", "CompareResult"):
        from . import compare as _m
    elif name in ("evaluate_gates", "GateResult"):
        from . import gates as _m
    elif name == "write_junit":
        from . import junit as _m
    elif name == "write_report":
        from . import report as _m
    else:
        raise AttributeError(name)
    return getattr(_m, name)
