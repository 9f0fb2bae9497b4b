"""Statistics over raw latency samples (milliseconds)."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def mad(x) -> float:
    """Median absolute deviation, unscaled (scipy.stats.median_abs_deviation with scale=1)."""
    x = np.asarray(x, dtype=np.float64)
    return float(np.median(np.abs(x - np.median(x))))


def summarize(samples_ms: Sequence[float], peak_rss_mb: float | None = None) -> dict:
    """p50/p90/p99 (linear interpolation), mean, MAD (median absolute deviation, unscaled),
    standard deviation, min, max and the count. Empty input gives None figures."""
    x = np.asarray(list(samples_ms), dtype=np.float64)
    if x.size == 0:
        keys = ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "mad_ms", "stdev_ms", "min_ms", "max_ms")
        return {**{k: None for k in keys}, "n": 0, "peak_rss_mb": peak_rss_mb}
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return {
        "p50_ms": float(p50),
        "p90_ms": float(p90),
        "p99_ms": float(p99),
        "mean_ms": float(x.mean()),
        "mad_ms": mad(x),
        "stdev_ms": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "min_ms": float(x.min()),
        "max_ms": float(x.max()),
        "n": int(x.size),
        "peak_rss_mb": peak_rss_mb,
    }


def relative_spread(samples_ms: Sequence[float]) -> float | None:
    """MAD / median: how noisy a run was (0.01 = 1 %)."""
    x = np.asarray(list(samples_ms), dtype=np.float64)
    if x.size == 0:
        return None
    med = float(np.median(x))
    return mad(x) / med if med > 0 else None
