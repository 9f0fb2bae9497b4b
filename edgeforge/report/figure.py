"""The one figure a person reads for a model: its task's own metric.

A detector is judged on mAP, a segmenter on mIoU, a recogniser on CTC sequence accuracy, a
classifier on top-1. :func:`task_figure` picks that figure from a bench result's ``drift`` or a
manifest's ``verify`` (both hold ``task``: ``{kind, metric, float, artifact, drop}`` when a
``[task]`` is declared, and the top-1 fields for a classifier), so the build summary, ``bench``,
``report``, ``compare`` and ``gate`` all show and judge the same thing.

Sign convention, everywhere: a drop is ``float - artifact`` in percentage points; positive is
worse (the artifact lost that much).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import fmt

SIGN_NOTE = "drop = float - artifact, in percentage points: positive is worse"

# the task record's metric name -> what a person reads
NAMES = {"top1": "top-1 accuracy", "top1_agreement": "top-1 agreement", "map50": "mAP@0.5",
         "map50_95": "mAP@0.5:0.95", "miou": "mIoU", "sequence_accuracy": "CTC accuracy",
         "recall@1": "recall@1", "cosine": "cosine"}

ACCURACY_BUDGET, METRIC_BUDGET = "max_accuracy_drop", "max_metric_drop"
BUDGET_FLAGS = {ACCURACY_BUDGET: "--max-accuracy-drop", METRIC_BUDGET: "--max-metric-drop"}


@dataclass(frozen=True)
class TaskFigure:
    kind: str                  # classification, detection, segmentation, ctc, embedding, generic
    metric: str                # the record's name: "miou", "map50_vs_float", "top1"
    float: float | None        # shares, 0-1
    artifact: float | None
    drop: float | None         # points, positive = worse
    skipped: str | None = None  # why there is no figure

    @property
    def name(self) -> str:
        """For people: "mIoU", "mAP@0.5 vs float", "top-1 accuracy"."""
        base = self.metric.removesuffix("_vs_float")
        return NAMES.get(base, base) + (" vs float" if self.metric.endswith("_vs_float") else "")

    @property
    def budget(self) -> str:
        """The gate whose budget applies: a classifier's top-1 is the accuracy budget, every
        other task metric the metric budget."""
        return ACCURACY_BUDGET if self.kind == "classification" else METRIC_BUDGET

    def value(self, v: float | None) -> str:
        return fmt.num(v, ".4f") if self.metric.startswith("cosine") else fmt.pct(v)

    def text(self) -> str:
        """'mIoU 71.20% (float 72.00%, drop 0.80 points)', or why it was not measured."""
        if self.artifact is None and self.float is None and self.drop is not None:
            return f"{self.name} drop {fmt.points(self.drop)} points"
        if self.artifact is None and self.float is None:
            return f"{self.name}: not measured" + (f" ({self.skipped})" if self.skipped else "")
        if self.artifact is None:
            return f"{self.name}: float {self.value(self.float)} (the artifact runs on the device only)"
        return (f"{self.name} {self.value(self.artifact)} (float {self.value(self.float)}, "
                f"drop {fmt.points(self.drop)} points)")

    def to_dict(self) -> dict:
        return {"kind": self.kind, "metric": self.metric, "name": self.name, "float": self.float,
                "artifact": self.artifact, "drop": self.drop, "budget": self.budget}


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def task_figure(doc: dict | None) -> TaskFigure | None:
    """The task's own figure of ``doc`` (a result's ``drift`` or a manifest's ``verify``), or
    None when it holds none (a cosine-only check of an unlabelled classifier)."""
    doc = doc or {}
    task = doc.get("task") or {}
    if task.get("metric") and task.get("kind") not in (None, "classification"):
        return TaskFigure(task["kind"], task["metric"], _num(task.get("float")), _num(task.get("artifact")),
                          _num(task.get("drop")), task.get("skipped"))
    if any(doc.get(k) is not None for k in ("accuracy", "float_accuracy", "accuracy_drop")):
        return TaskFigure("classification", "top1", _num(doc.get("float_accuracy")), _num(doc.get("accuracy")),
                          _num(doc.get("accuracy_drop")))
    if task.get("metric") == "top1" and task.get("float") is not None:
        return TaskFigure("classification", "top1", _num(task.get("float")), _num(task.get("artifact")),
                          _num(task.get("drop")), task.get("skipped"))
    if task.get("kind") not in (None, "classification"):      # a [task] whose figure is missing
        return TaskFigure(task["kind"], task.get("metric") or task["kind"], None, None, None,
                          task.get("skipped") or "no task metric recorded")
    return None


def is_classifier(doc: dict | None) -> bool:
    fig = task_figure(doc)
    return fig is None or fig.kind == "classification"


def figures_of_pair(a: dict, b: dict) -> dict | None:
    """``compare``'s task figures of results ``a`` and ``b``: ``{"a": ..., "b": ..., "line": ...}``,
    the line 'mIoU (float 72.30%): A 72.30% -> B 70.10%, drop A 0.00 -> B 2.20 points'; None when
    neither holds one."""
    fa, fb = task_figure(a.get("drift")), task_figure(b.get("drift"))
    if fa is None and fb is None:
        return None
    if fa is not None and fb is not None and fa.name != fb.name:
        line = f"task metric: A {fa.text()}; B {fb.text()}"
    else:
        f = fa or fb
        floats = {x.value(x.float) for x in (fa, fb) if x is not None}
        flt = (f"float {floats.pop()}" if len(floats) == 1
               else f"float A {fa.value(fa.float)}, B {fb.value(fb.float)}")

        def val(x):
            return "-" if x is None else x.value(x.artifact)

        def drop(x):
            return "-" if x is None else fmt.points(x.drop)
        line = f"{f.name} ({flt}): A {val(fa)} -> B {val(fb)}, drop A {drop(fa)} -> B {drop(fb)} points"
    return {"a": fa.to_dict() if fa else None, "b": fb.to_dict() if fb else None, "line": line}


def drop_cell(drift: dict | None) -> str:
    """A table cell: the drop in points of the run's own metric, named unless it is top-1
    ('0.60', '1.40 mAP@0.5', '-')."""
    fig = task_figure(drift)
    if fig is None or fig.drop is None:
        return "-"
    return fmt.points(fig.drop) + ("" if fig.kind == "classification" else f" {fig.name.replace(' vs float', '*')}")
