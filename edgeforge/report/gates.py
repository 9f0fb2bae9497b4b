"""Quality gates over bench results: one GateResult per gate, device and result.

- ``max_accuracy_drop`` and ``max_metric_drop``: drop budgets, applied by meaning (see
  :func:`drop_gate`): a classifier's top-1 drop (``drift.accuracy_drop``) against the accuracy
  budget, a detector's mAP, a segmenter's mIoU, a recogniser's CTC accuracy (``drift.task.drop``)
  against the metric budget, so one directory mixing them passes when each is within its own;
- ``max_p50_ms``: the run's median latency <= Y ms;
- ``min_int8_speedup``: for each INT8 run, p50(fp32) / p50(int8) >= Z, the fp32 run being the
  same model and target on the same device (see :func:`.pairing.float_counterpart`);
- ``min_accelerated_nodes``: the share of the artifact's nodes that ran on an accelerating
  execution provider (not CPUExecutionProvider), from the runner's placement record, >= F (0-1).

A gate that cannot be measured (no drift recorded, no fp32 counterpart, no INT8 run on a device)
fails and says why: a CI gate must not pass because the data is missing.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, fields

from ..errors import ConfigError, GateFailed
from .figure import ACCURACY_BUDGET, METRIC_BUDGET, task_figure
from .pairing import emulated, emulated_reason, fingerprint_id, float_counterpart, label, p50_ms, precision, short

GATE_NAMES = ("max_accuracy_drop", "max_p50_ms", "min_int8_speedup", "min_accelerated_nodes", "max_metric_drop")
UNITS = {"max_accuracy_drop": " pts", "max_metric_drop": " pts", "max_p50_ms": " ms", "min_int8_speedup": "x", "min_accelerated_nodes": "",
         "min_throughput": " inf/s", "max_p99_ms": " ms"}   # the last two: edgeforge load


@dataclass(frozen=True)
class GateThresholds:
    """The gates asked for, by name (None: not asked), checked once when made: the drop budgets,
    the latency and the speed-up are numbers >= 0, the accelerated share is 0 to 1. Every verb
    that gates (bench, run, sweep, fleet, gate, deploy's canaries) evaluates one of these with
    :func:`evaluate_gates`."""

    max_accuracy_drop: float | None = None      # points of top-1
    max_p50_ms: float | None = None
    min_int8_speedup: float | None = None       # x, vs fp32 of the same model
    min_accelerated_nodes: float | None = None  # share 0-1 on accelerating EPs
    max_metric_drop: float | None = None        # points of the [task] metric

    def __post_init__(self):
        for flag in ("max_accuracy_drop", "max_p50_ms", "min_int8_speedup", "max_metric_drop"):
            value = getattr(self, flag)
            if value is not None and not (isinstance(value, (int, float)) and 0.0 <= value < math.inf):
                raise ConfigError(f"{flag} must be a number >= 0, not {value}")
        share = self.min_accelerated_nodes
        if share is not None and not (isinstance(share, (int, float)) and 0.0 <= share <= 1.0):
            raise ConfigError(f"min_accelerated_nodes is a share of the nodes, 0 to 1, not {share}")

    @property
    def requested(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def asked(self) -> dict[str, float]:
        """The thresholds given, by gate name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class GateResult:
    name: str                      # one of GATE_NAMES
    device: str                    # device name
    passed: bool
    measured: float | None         # None when it could not be measured
    threshold: float
    message: str
    subject: str = ""              # model/target/backend/precision@sha12 — what was measured
    artifact_sha256: str = ""
    fingerprint: str = ""          # fingerprint id (see keys.fingerprint_id)
    metric: str = ""               # drop gates: the metric judged ("mIoU", "top-1 accuracy")

    @property
    def case_name(self) -> str:
        return " ".join(x for x in (self.name, f"[{self.metric}]" if self.metric else "", self.subject) if x)

    def to_dict(self) -> dict:
        return asdict(self)


def evaluate_gates(results: list[dict], thresholds: GateThresholds | None = None, *, reference: list[dict] = (),
                   force: bool = False, **limits: float | None) -> list[GateResult]:
    """Evaluate the gates of ``thresholds`` (or of ``limits``, the same by name) over ``results``;
    order: device, gate, result.

    ``reference`` holds earlier runs that are not gated themselves but may serve as the fp32
    counterpart of an INT8 run (``edgeforge bench`` passes the results directory's runs).
    A latency gate over an emulated run is a ConfigError (exit 2) unless ``force``.
    """
    t = thresholds if thresholds is not None else GateThresholds(**limits)
    if thresholds is not None and limits:
        raise TypeError("evaluate_gates: give thresholds or named limits, not both")
    max_accuracy_drop, max_p50_ms, min_int8_speedup = t.max_accuracy_drop, t.max_p50_ms, t.min_int8_speedup
    min_accelerated_nodes, max_metric_drop = t.min_accelerated_nodes, t.max_metric_drop
    timed = [r for r in results if emulated(r)] if (max_p50_ms, min_int8_speedup) != (None, None) else []
    if timed and not force:
        flag = "--max-p50-ms" if max_p50_ms is not None else "--min-int8-speedup"
        raise ConfigError(f"{flag} on emulated results: {emulated_reason(timed[0], label(timed[0]))}, and "
                          "emulated timings are not performance figures",
                          hint="gate latency on a real device, or pass --force; --max-accuracy-drop holds there")
    out: list[GateResult] = []
    devices = sorted({r["device"]["name"] for r in results})
    for device in devices:
        on_device = [r for r in results if r["device"]["name"] == device]
        if (max_accuracy_drop, max_metric_drop) != (None, None):
            out += [drop_gate(r, max_accuracy_drop, max_metric_drop) for r in on_device]
        if max_p50_ms is not None:
            out += [_latency_gate(r, max_p50_ms) for r in on_device]
        if min_int8_speedup is not None:
            int8 = [r for r in on_device if precision(r) == "int8"]
            pool = list(results) + [r for r in reference if not any(r is x for x in results)]
            out += [_speedup_gate(r, pool, min_int8_speedup) for r in int8]
            if not int8:
                out.append(GateResult("min_int8_speedup", device, False, None, min_int8_speedup,
                                      f"no int8 result on {device} to check"))
        if min_accelerated_nodes is not None:
            out += [placement_gate(r, min_accelerated_nodes) for r in on_device]
    return _unique_subjects(out)


def _base(r: dict) -> dict:
    return {"device": r["device"]["name"], "subject": f"{label(r)}@{short(r['artifact']['sha256'])}",
            "artifact_sha256": r["artifact"]["sha256"], "fingerprint": fingerprint_id(r)}


def drop_gate(r: dict, max_accuracy_drop: float | None, max_metric_drop: float | None) -> GateResult:
    """The run's drop in its own metric (:func:`.figure.task_figure`) against its budget: a
    classifier's top-1 against ``max_accuracy_drop`` (or, without one, ``max_metric_drop``:
    top-1 is a classifier's task metric), any other task's metric against ``max_metric_drop``.
    A figure that is missing, or a task model with only the top-1 budget, fails and says why."""
    fig = task_figure(r.get("drift"))
    classifier = fig is None or fig.budget == ACCURACY_BUDGET
    name = ACCURACY_BUDGET if classifier and max_accuracy_drop is not None else METRIC_BUDGET
    limit = max_accuracy_drop if name == ACCURACY_BUDGET else max_metric_drop
    what = fig.name if fig is not None else "top-1 accuracy"
    if limit is None:        # a task model, and only the top-1 budget given
        return GateResult(METRIC_BUDGET, passed=False, measured=None, threshold=max_accuracy_drop,
                          metric=what, message=(f"{what} ({fig.kind}) has no budget: --max-accuracy-drop "
                                                "is a classifier's top-1; pass --max-metric-drop"), **_base(r))
    drop = fig.drop if fig is not None else None
    if drop is None:
        why = (fig.skipped if fig is not None else None) or (r.get("drift") or {}).get("skipped")
        missing = ("no accuracy drop recorded (drift.accuracy_drop)" if fig is None
                   else f"no {what} drop recorded")
        return GateResult(name, passed=False, measured=None, threshold=limit, metric=what,
                          message=missing + (f" ({why})" if why else ""), **_base(r))
    ok = drop <= limit
    return GateResult(name, passed=ok, measured=float(drop), threshold=limit, metric=what,
                      message=f"{what} drop {drop:.2f} points {'<=' if ok else '>'} {limit:g} allowed",
                      **_base(r))


def _latency_gate(r: dict, limit: float) -> GateResult:
    p50 = p50_ms(r)
    ok = p50 <= limit
    return GateResult("max_p50_ms", passed=ok, measured=p50, threshold=limit,
                      message=f"p50 {p50:.4g} ms {'<=' if ok else '>'} {limit:g} ms allowed", **_base(r))


def _speedup_gate(r: dict, results: list[dict], minimum: float) -> GateResult:
    ref, why = float_counterpart(r, results)
    if ref is None:
        return GateResult("min_int8_speedup", passed=False, measured=None, threshold=minimum, message=why, **_base(r))
    p_float, p_int8 = p50_ms(ref), p50_ms(r)
    speedup = p_float / p_int8
    ok = speedup >= minimum
    return GateResult("min_int8_speedup", passed=ok, measured=speedup, threshold=minimum,
                      message=(f"int8 speed-up {speedup:.2f}x {'>=' if ok else '<'} {minimum:g}x required "
                               f"(fp32 p50 {p_float:.4g} ms [{short(ref['artifact']['sha256'])}] / "
                               f"int8 p50 {p_int8:.4g} ms)"), **_base(r))


def placement_gate(r: dict, minimum: float) -> GateResult:
    """The share of nodes on an accelerating execution provider (the runner's placement)."""
    place = (r.get("runtime") or {}).get("placement")
    if not place or not place.get("nodes"):
        return GateResult("min_accelerated_nodes", passed=False, measured=None, threshold=minimum,
                          message="no execution-provider placement recorded (onnxruntime runs only)", **_base(r))
    share = place["accelerated"] / place["nodes"]
    ok = share >= minimum
    return GateResult("min_accelerated_nodes", passed=ok, measured=share, threshold=minimum,
                      message=(f"{place['accelerated']}/{place['nodes']} nodes accelerated ({share:.0%}) "
                               f"{'>=' if ok else '<'} {minimum:.0%} required; {place['summary']}"), **_base(r))


def _unique_subjects(gates: list[GateResult]) -> list[GateResult]:
    """Repeated runs of one artifact on one device get #2, #3 … so every test case name is unique."""
    seen: Counter = Counter()
    out = []
    for g in gates:
        key = (g.device, g.name, g.subject)
        seen[key] += 1
        if seen[key] > 1:
            g = GateResult(**{**g.to_dict(), "subject": f"{g.subject}#{seen[key]}"})
        out.append(g)
    return out


def require_passed(gates: list[GateResult]) -> None:
    """Raise GateFailed (exit 1) naming the first failed gates, if any failed."""
    failed = [g for g in gates if not g.passed]
    if failed:
        shown = "; ".join(f"{g.name} on {g.device}: {g.message}" for g in failed[:3])
        more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
        raise GateFailed(f"{len(failed)} of {len(gates)} gates failed: {shown}{more}",
                         gates=failed)
