"""The knee of a throughput-latency curve and the SLO pick: pure functions over load levels.

A level is a dict as the runner reports it (``edgeforge.load/1``): mode (closed|open), sessions
(shared|own), threads, batch, concurrency, rate, and its figures (inferences_per_s, p99_ms,
errors, ...). A *series* is the levels that differ only in offered load: the same mode,
sessions, threads and batch, ordered by concurrency (closed loop) or rate (open loop).

- The knee of a series is the last level worth going to: the one after which throughput grows
  by less than ``KNEE_GAIN`` (10 %) while p99 keeps rising. A curve that still scales, or whose
  p99 does not rise, has no knee (yet): more load would still pay.
- The SLO pick is the level with the highest throughput whose p99 meets the SLO and which had
  no errors.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

KNEE_GAIN = 0.10


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def measured(level: dict) -> bool:
    """A level that ran and completed requests (not skipped), with its throughput and p99."""
    return (not level.get("skipped") and bool(level.get("completed")) and _real(level.get("p99_ms"))
            and _real(level.get("inferences_per_s")))


def series_key(level: dict) -> tuple:
    return (level.get("mode", "closed"), level.get("sessions", "shared"), level.get("threads"),
            int(level.get("batch") or 1))


def load_of(level: dict) -> float:
    """The offered load that orders a series: the rate in open loop, else the concurrency."""
    if level.get("mode") == "open" and _real(level.get("rate")):
        return float(level["rate"])
    return float(level.get("concurrency") or 1)


def series(levels: Iterable[dict]) -> dict[tuple, list[int]]:
    """Indices into ``levels`` of each series' measured levels, ordered by offered load."""
    levels = list(levels)
    out: dict[tuple, list[int]] = {}
    for i, lv in enumerate(levels):
        if measured(lv):
            out.setdefault(series_key(lv), []).append(i)
    return {k: sorted(ix, key=lambda i: load_of(levels[i])) for k, ix in out.items()}


def knee_index(points: list[tuple[float, float]], gain: float = KNEE_GAIN) -> int | None:
    """``points``: (throughput, p99) in order of offered load. The index of the knee: the first
    point after which throughput grows by less than ``gain`` while p99 rises; None when there
    is none."""
    for i in range(len(points) - 1):
        (t0, p0), (t1, p1) = points[i], points[i + 1]
        if t1 < t0 * (1.0 + gain) * (1 - 1e-12) and p1 > p0:     # 10.0 % exactly still grows
            return i
    return None


def knees(levels: list[dict], gain: float = KNEE_GAIN) -> list[dict]:
    """One entry per series: its key, its level indices, and the index of its knee (or None)."""
    out = []
    for key, ix in series(levels).items():
        pts = [(float(levels[i]["inferences_per_s"]), float(levels[i]["p99_ms"])) for i in ix]
        k = knee_index(pts, gain)
        out.append({"mode": key[0], "sessions": key[1], "threads": key[2], "batch": key[3],
                    "levels": ix, "knee": ix[k] if k is not None else None})
    return out


def pick_slo(levels: list[dict], slo_p99_ms: float) -> int | None:
    """Index of the highest-throughput level with p99 <= ``slo_p99_ms`` and no errors."""
    ok = [i for i, lv in enumerate(levels)
          if measured(lv) and not lv.get("errors") and not lv.get("unserved")
          and lv["p99_ms"] <= slo_p99_ms]
    if not ok:
        return None
    return max(ok, key=lambda i: (levels[i]["inferences_per_s"], -levels[i]["p99_ms"]))


def _rate(x) -> str:
    if not _real(x):
        return "?"                  # a field a result file left null
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def describe(level: dict) -> str:
    """The settings of a level, as they would go into an app's configuration."""
    threads = level.get("threads")
    parts = [f"threads {threads if threads else 'default'}", f"batch {level.get('batch', 1)}"]
    k = int(level.get("concurrency") or 1)
    what = "session" if level.get("sessions") == "own" and k > 1 else "request"   # own: one session each
    if level.get("mode") == "open":
        parts.append(f"{k} {'processes' if what == 'session' else 'workers' if k != 1 else 'worker'} at "
                     f"{_rate(level.get('rate'))} req/s")
    else:
        parts.append(f"{k} concurrent {what}{'s' if k != 1 else ''}")
    return ", ".join(parts)


def _ms(x) -> str:
    if not _real(x):
        return "?"
    return f"{x:.1f}" if x >= 1 else f"{x:.2g}"


def load_point(level: dict) -> str:
    """``3 concurrent requests`` or ``250 req/s``: where on its series a level is."""
    if level.get("mode") == "open":
        return f"{_rate(level.get('rate'))} req/s"
    k = int(level.get("concurrency") or 1)
    return f"{k} concurrent request{'s' if k != 1 else ''}"


def figures(level: dict) -> str:
    return f"{_rate(level.get('inferences_per_s'))} inf/s at p99 {_ms(level.get('p99_ms'))} ms"


def recommendation_line(level: dict) -> str:
    """E.g. ``threads 2, batch 4, 3 concurrent requests: 412 inf/s at p99 8.1 ms``."""
    return f"{describe(level)}: {figures(level)}"


def analyse(levels: list[dict], slo_p99_ms: float | None = None, gain: float = KNEE_GAIN) -> dict:
    """What a load result records under ``analysis``: the knees, and the SLO pick."""
    if slo_p99_ms is not None and not (_real(slo_p99_ms) and slo_p99_ms > 0):
        raise ValueError(f"slo_p99_ms must be a finite number of milliseconds > 0, not {slo_p99_ms}")
    out: dict = {"knee_gain": gain, "knees": knees(levels, gain), "slo_p99_ms": slo_p99_ms,
                 "recommendation": None}
    if slo_p99_ms is not None:
        i = pick_slo(levels, slo_p99_ms)
        out["recommendation"] = ({"level": i, "line": recommendation_line(levels[i])} if i is not None else
                                 {"level": None, "line": f"no level meets p99 <= {slo_p99_ms:g} ms "
                                                         "without errors"})
    return out
