"""The INT8 verdict: is INT8 worth shipping here, in one line a person can act on.

One rule, used by the build summary (host stand-in), ``bench``, ``sweep``, ``report``,
``--precision auto`` and ``benchmarks/int8_speedup.py``:

- the speed comes from :mod:`.int8_procedure` (compare's statistics on fp32 (A) against INT8
  (B), one minimum effect of 5 % everywhere, no selection on the deciding samples): INT8 is
  "faster" or "slower" only when it says so, else "not significant"; every line states the
  interval and where it was measured;
- the accuracy is the INT8 build's cost: the drop of its task's own figure (top-1, mAP, mIoU,
  CTC accuracy; :mod:`.figure`) in points, positive = worse, or its cosine against float, and
  whether it is within the accuracy budget;
- ship INT8 only when it is significantly faster *and* within the budget; otherwise ship fp32
  (a not-significant speed-up buys only size).

The speed-up is ``p50(fp32) / p50(INT8)``: above 1 INT8 is faster, "0.77x of fp32" is slower.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..results.report_doc import Pair
from .int8_procedure import interval_text


@dataclass(frozen=True)
class Verdict:
    ship: str                     # "int8" | "fp32"
    speed: str                    # "faster" | "slower" | "not significant" | "not measured"
    speedup: float | None         # p50(fp32) / p50(int8)
    p_value: float | None
    accuracy_drop: float | None   # points lost (positive: INT8 is worse)
    cosine: float | None
    within_budget: bool | None    # None: no budget known
    line: str

    def to_dict(self) -> dict:
        return asdict(self)


def _get(c, key):
    if c is None:
        return None
    return c.get(key) if isinstance(c, dict) else getattr(c, key, None)


def accuracy_text(accuracy_drop: float | None, cosine: float | None, metric: str = "accuracy") -> str:
    """'accuracy drop 0.3 points' (positive: the artifact is worse; the one sign convention,
    :data:`.figure.SIGN_NOTE`), 'mIoU drop 0.8 points' with ``metric``, else 'cosine 0.9991',
    else ''."""
    if accuracy_drop is not None:
        drop = float(accuracy_drop)
        return f"{metric} drop {drop:.1f} points" if round(drop, 1) else f"{metric} drop 0.0 points"
    if cosine is not None:
        return f"cosine {cosine:.4f}"
    return ""


def why_not_significant(compare) -> str:
    """compare's reason for "not significant", short, naming the figure that decided it and never
    a small p beside "not significant": 'p=0.24' (the rank test), 'a 0.5% change, under the 1%
    threshold', or 'its 95% interval, 0.96x-1.07x, includes 1x' (the speed-up's interval,
    p50(A)/p50(B) as the verdict line shows it; a small p alone does not make a change)."""
    p = _get(compare, "p_value")
    reason = _get(compare, "reason") or ""
    if reason.startswith("below the"):
        ratio = _get(compare, "ratio")
        change = f"a {abs(float(ratio) - 1) * 100:.1f}% change, " if ratio else ""
        return f"{change}under the {(_get(compare, 'min_change') or 0) * 100:g}% threshold"
    if "interval" in reason:
        level = f"{(1 - (_get(compare, 'alpha') or 0.05)) * 100:g}%"
        lo, hi = _get(compare, "ci_low"), _get(compare, "ci_high")
        if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0:
            return f"no {level} interval of the ratio could be formed"
        return f"its {level} interval, {1 / hi:.2f}x-{1 / lo:.2f}x, includes 1x"
    return f"p={p:.2g}" if p is not None else "p unknown"


def int8_verdict(compare=None, *, speedup: float | None = None, accuracy_drop: float | None = None,
                 cosine: float | None = None, within_budget: bool | None = None,
                 where: str = "on this device", metric: str = "accuracy") -> Verdict:
    """The verdict for one INT8 build against its fp32 counterpart.

    ``compare``: compare(fp32, int8) as a CompareResult or its ``to_dict()`` (None: no
    statistics, only ``speedup``). ``where``: how the line names the place measured; ``metric``:
    the figure ``accuracy_drop`` is a drop of (the task's own: "mIoU", "mAP@0.5")."""
    verdict = _get(compare, "verdict")
    ratio = _get(compare, "ratio")
    if ratio:
        speedup = 1.0 / float(ratio)
    p = _get(compare, "p_value")
    speed = verdict if verdict in ("faster", "slower", "not significant") else "not measured"
    acc = accuracy_text(accuracy_drop, cosine, metric)
    over = within_budget is False
    iv = interval_text(compare)
    if speed == "faster" and not over:
        ship = "int8"
        line = (f"INT8 {speedup:.2f}x faster than fp32" + (f", {acc}" if acc else "") + ": ship INT8"
                + f" ({where}" + (f", {iv})" if iv else ")"))
    elif speed == "faster":
        ship = "fp32"
        line = (f"INT8 {speedup:.2f}x faster than fp32 {where}" + (f" ({iv})" if iv else "")
                + f", but {acc or 'accuracy'} is over the accuracy budget: ship fp32")
    elif speed == "slower":
        ship = "fp32"
        line = (f"INT8 {speedup:.2f}x of fp32 (slower) {where}" + (f" ({iv})" if iv else "")
                + (f", {acc}" if acc else "") + ": ship fp32")
    elif speed == "not significant":
        ship = "fp32"
        why = why_not_significant(compare)
        why += f", {iv}" if iv and "interval" not in why else ""        # every line states its interval
        line = (f"INT8 {speedup:.2f}x of fp32, not significant ({why}) {where}"
                + (f", {acc}" if acc else "") + ": no speed-up, ship fp32 unless size matters")
    else:
        ship = "fp32"
        shown = f"{speedup:.2f}x of fp32, " if speedup else ""
        line = f"INT8 {shown}speed not compared {where}: no verdict, fp32 until measured"
    return Verdict(ship=ship, speed=speed, speedup=speedup, p_value=p, accuracy_drop=accuracy_drop,
                   cosine=cosine, within_budget=within_budget, line=line)


def pair_verdict(pair: Pair) -> Verdict | None:
    """The verdict of one ``int8_vs_float`` pair of a report summary (None without an fp32
    run); the accuracy is the INT8 run's drift on the device."""
    from .int8_procedure import INTERLEAVED

    if not pair.float_ and not pair.interleaved:
        return None
    emulated = "emulated" in (pair.note or "")
    fig = pair.figure
    drop = fig.drop if fig else pair.accuracy_drop
    where = INTERLEAVED if pair.interleaved else "on this (emulated) device" if emulated else "on this device"
    return int8_verdict(pair.compare, speedup=pair.speedup, accuracy_drop=drop,
                        cosine=pair.cosine if drop is None else None, where=where,
                        metric=(fig.name if fig else None) or "accuracy")


def result_verdict(r: dict, pool: list[dict]) -> tuple[Verdict | None, str]:
    """The verdict of INT8 bench result ``r``: from its own interleaved rounds with the build's
    fp32 sibling when it has them (:func:`.int8_procedure.interleaved_samples`), else against its
    fp32 counterpart in ``pool`` (same model, target, backend, device and runtime; a separate
    run). (verdict, "") or (None, why there is none)."""
    from ..errors import ConfigError
    from .figure import task_figure
    from .int8_procedure import INTERLEAVED, SEPARATE, decide, decide_results, interleaved_samples
    from .pairing import float_counterpart, p50_ms

    drift = r.get("drift") or {}
    fig = task_figure(drift)
    drop = fig.drop if fig is not None else None
    acc = {"accuracy_drop": drop, "cosine": drift.get("cosine") if drop is None else None,
           "metric": fig.name if fig is not None else "accuracy"}
    rounds = interleaved_samples(r)
    if rounds is not None:
        return int8_verdict(decide(rounds["fp32"], rounds["int8"]), where=INTERLEAVED, **acc), ""
    ref, why = float_counterpart(r, pool)
    if ref is None:
        return None, why
    try:
        c = decide_results(ref, r, labels=("fp32", "int8"))
    except ConfigError as exc:
        return None, f"not compared: {exc.one_line()}"
    return int8_verdict(c, speedup=p50_ms(ref) / p50_ms(r), where=SEPARATE, **acc), ""


def choose(candidates: list[dict]) -> dict:
    """``--precision auto``: the fastest candidate that meets the accuracy budget, where a
    precision other than fp32 must be significantly faster than fp32 to be chosen.

    Each candidate: ``{"precision", "p50_ms", "met": bool, "compare": compare(fp32, it) as a
    dict or None}`` (fp32's own compare is None). Returns ``{"precision", "reason"}``."""
    by = {c["precision"]: c for c in candidates}
    if "fp32" not in by:
        raise ValueError("precision auto needs an fp32 candidate")
    wins = [c for c in candidates if c["precision"] != "fp32" and c.get("met")
            and _get(c.get("compare"), "verdict") == "faster"]
    if wins:
        best = min(wins, key=lambda c: c["p50_ms"])
        return {"precision": best["precision"],
                "reason": f"{best['precision']} is {by['fp32']['p50_ms'] / best['p50_ms']:.2f}x faster than "
                          "fp32 and meets the accuracy budget"}
    why = []
    for c in candidates:
        if c["precision"] == "fp32":
            continue
        v = _get(c.get("compare"), "verdict") or "not measured"
        ratio = by["fp32"]["p50_ms"] / c["p50_ms"] if c.get("p50_ms") else None
        shown = f" ({ratio:.2f}x)" if ratio else ""
        why.append(f"{c['precision']} {'misses the budget' if not c.get('met') else v}{shown}")
    return {"precision": "fp32", "reason": "no other precision is significantly faster within the budget"
            + (f": {', '.join(why)}" if why else "")}
