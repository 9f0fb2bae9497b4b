"""One procedure for "is INT8 faster than fp32 here?", wherever it is measured: the build on the
host, ``bench`` on a device, ``report``, ``--precision auto``.

- **Rounds.** Both are timed in interleaved rounds wherever they can be: the build and
  ``--precision auto`` on the host (:func:`edgeforge.quant.speed.interleaved`), and ``bench`` of
  an INT8 build on the device, against the fp32 sibling the build ships (manifest
  ``float_artifact``; the runner's ``int8_vs_fp32`` event, :func:`interleaved_samples`). The
  load's drift falls on both alike. Only a bench without a sibling (an older build,
  ``--no-fp32-sibling``, benchmark_bin) compares two separate runs; its line says so.
- **No selection on the deciding samples.** Where the build picked the fastest of several INT8
  variants, the samples that picked it overstate it (the best of k noisy medians is biased
  low). :func:`decide_after_selection` times fp32 and the chosen variant again, in fresh
  rounds, and only those decide.
- **The statistics** are :func:`edgeforge.report.compare.compare_samples` (block medians,
  Mann-Whitney, a bootstrap interval of the ratio) at ``alpha`` 0.05, with one minimum effect,
  :data:`MIN_EFFECT`: a speed-up or slow-down under 5 % is "not significant" everywhere. Two
  runs on one shared 2-core host differ by a few percent from run to run (TOOLCHAIN item 18);
  a 1 % threshold let the build say "faster" where the bench on the same machine said
  "slower" (issue 47: PP-LCNet 1.25x at build, 0.93x at bench).
- **Both state the interval** (:func:`interval_text`), and the build's line says it came from the
  host.
"""
from __future__ import annotations

import math
from typing import Callable

from .compare import ALPHA, CompareResult, compare, compare_samples

MIN_EFFECT = 0.05


def decide(fp32_ms, int8_ms, labels: tuple[str, str] = ("fp32", "int8")) -> CompareResult:
    """The statistics of the INT8 verdict on two sample lists (ms), fp32 first."""
    return compare_samples(fp32_ms, int8_ms, ALPHA, min_change=MIN_EFFECT, labels=labels)


def decide_results(fp32_result: dict, int8_result: dict, labels: tuple[str, str] = ("fp32", "int8")) -> CompareResult:
    """The same on two bench results (compare's checks: same device and runtime)."""
    return compare(fp32_result, int8_result, labels=labels, min_change=MIN_EFFECT)


def decide_after_selection(samples: dict[str, list[float]], chosen: str,
                           retime: Callable[[], dict[str, list[float]]] | None) -> tuple[dict, bool]:
    """The samples that decide: ``samples[fp32]`` and ``samples[chosen]`` when ``chosen`` was the
    only INT8 candidate (``retime`` None), else fresh rounds from ``retime()`` ({"fp32", "int8"}).
    Returns ({"fp32": [...], "int8": [...]}, whether they were timed again)."""
    if retime is None:
        return {"fp32": list(samples["fp32"]), "int8": list(samples[chosen])}, False
    fresh = retime()
    return {"fp32": list(fresh["fp32"]), "int8": list(fresh["int8"])}, True


def interval_text(c) -> str:
    """'95% interval 1.18x-1.31x' of the speed-up p50(fp32)/p50(int8), or ''."""
    get = (c.get if isinstance(c, dict) else lambda k: getattr(c, k, None)) if c is not None else (lambda k: None)
    lo, hi, alpha = get("ci_low"), get("ci_high"), get("alpha") or ALPHA
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0:
        return ""
    return f"{(1 - alpha) * 100:g}% interval {1 / hi:.2f}x-{1 / lo:.2f}x"


INTERLEAVED = "on this device, interleaved with its fp32 sibling"
SEPARATE = "on this device, separate runs"


def interleaved_samples(result: dict) -> dict[str, list[float]] | None:
    """A bench result's own interleaved rounds of INT8 and its fp32 sibling ({"fp32", "int8"},
    ms), or None when it has none, or when they come from an emulated device (emulated timings are
    not performance figures: such a run is compared as separate runs are, and refused)."""
    from .pairing import emulated

    if emulated(result):
        return None
    pair = result.get("int8_vs_fp32") or {}
    fp32, int8 = pair.get("fp32_samples_ms"), pair.get("int8_samples_ms")
    if not fp32 or not int8:
        return None
    return {"fp32": list(fp32), "int8": list(int8)}

