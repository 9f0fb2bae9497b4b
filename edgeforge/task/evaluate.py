"""The task record of verify (``verify.task``) and bench (``drift.task``):
``{kind, metric, float, artifact, drop}``, plus every figure under ``figures``.

``float`` and ``artifact`` are the task metric of the float model and of the artifact, as
shares (0-1); ``drop`` is ``float - artifact`` in percentage points. With labels the metric is
measured against them; without, against the float model's own answers (so ``float`` is 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from . import detection as det
from . import metrics as m

KINDS = ("classification", "detection", "segmentation", "ctc", "embedding", "generic")
DETECTION_LABELS = ("gt_boxes", "gt_classes", "gt_counts")
LABEL_KEYS = ("labels",) + DETECTION_LABELS


@dataclass(frozen=True)
class Task:
    """What ``[task]`` says, in the terms the metrics need."""
    kind: str = "classification"
    output: int = 0                   # the model output the task reads ([data] label_output)
    blank: int = 0                    # CTC blank class
    time_axis: int = 1                # CTC: [N, T, C] (1) or [T, N, C] (0)
    top_k: int = 5                    # classification top-k; embedding recall@k uses k=1 and this
    score_threshold: float = 0.5      # detection vs float: the float boxes taken as ground truth
    classes: Optional[int] = None     # segmentation classes (default: the output's channels)


def has_labels(task: Task, labels: dict | None) -> bool:
    if not labels:
        return False
    need = DETECTION_LABELS if task.kind == "detection" else ("labels",)
    return all(labels.get(k) is not None for k in need)


def detections(outputs: list) -> list[np.ndarray]:
    """A detector's outputs -> per image ``[m, 6]`` rows: ``rows [M, 6]`` + ``counts [N]`` as
    NMS gives them, or raw ``boxes [N, A, 4]`` + ``scores [N, C, A]`` (NMS on the host)."""
    arrs = [np.asarray(o) for o in outputs]
    rows = next((a for a in arrs if a.ndim == 2 and a.shape[1] == 6), None)
    counts = next((a for a in arrs if a.ndim == 1), None)
    if rows is not None and counts is not None:
        return det.split(rows, counts)
    boxes = next((a for a in arrs if a.ndim == 3 and a.shape[2] == 4), None)
    scores = None if boxes is None else next(
        (a for a in arrs if a.ndim == 3 and a is not boxes and a.shape[2] == boxes.shape[1]), None)
    if scores is not None:
        return det.split(*det.nms(boxes, scores))
    shapes = ", ".join(str(list(a.shape)) for a in arrs)
    raise ValueError(f"a detector's outputs are rows [M, 6] + counts [N], or boxes [N, A, 4] + "
                     f"scores [N, C, A]; these are {shapes}")


def _out(outputs: list, task: Task) -> np.ndarray:
    if task.output >= len(outputs):
        raise ValueError(f"the task reads output {task.output}; the model has {len(outputs)}")
    return np.asarray(outputs[task.output])


def figures(task: Task, outputs: list, reference: list, labels: dict | None) -> dict:
    """Every figure of the task for ``outputs``: against ``labels`` when there are any, else
    against ``reference`` (the float model's outputs)."""
    lab = labels if has_labels(task, labels) else None
    k = task.kind
    if k == "classification":
        o = _out(outputs, task)
        if lab is None:
            return {"top1_agreement": m.top1_agreement(o, _out(reference, task))}
        return {"top1": m.topk_accuracy(o, lab["labels"], 1), f"top{task.top_k}": m.topk_accuracy(o, lab["labels"], task.top_k)}
    if k == "detection":
        dets = detections(outputs)
        if lab is None:
            return det.against_float(dets, detections(reference), task.score_threshold)
        return det.detection_scores(dets, det.ground_truth(lab["gt_boxes"], lab["gt_classes"], lab["gt_counts"]))
    if k == "segmentation":
        o = _out(outputs, task)
        classes = task.classes or (o.shape[1] if o.ndim == 4 else int(o.max()) + 1)
        truth = lab["labels"] if lab is not None else m.seg_argmax(_out(reference, task))
        return m.segmentation_scores(m.seg_argmax(o), truth, classes)
    if k == "ctc":
        pred = m.ctc_greedy(_out(outputs, task), task.blank, task.time_axis)
        truth = (m.unpad(lab["labels"]) if lab is not None
                 else m.ctc_greedy(_out(reference, task), task.blank, task.time_axis))
        return m.sequence_scores(pred, truth)
    if k == "embedding":
        o = _out(outputs, task)
        if lab is None:
            return {"cosine": m.cosine(o, _out(reference, task))}
        return {"recall@1": m.recall_at_k(o, lab["labels"], 1),
                f"recall@{task.top_k}": m.recall_at_k(o, lab["labels"], task.top_k)}
    if k == "generic":
        return {"cosine": min(m.cosine(o, r) for o, r in zip(outputs, reference)),
                "max_abs_error": max(m.max_abs_error(o, r) for o, r in zip(outputs, reference))}
    raise ValueError(f"unknown task kind {k!r}; one of {', '.join(KINDS)}")


def primary(task: Task, labelled: bool) -> str:
    """The name of the figure the task is judged on."""
    return {"classification": "top1" if labelled else "top1_agreement",
            "detection": "map50", "segmentation": "miou", "ctc": "sequence_accuracy",
            "embedding": "recall@1" if labelled else "cosine", "generic": "cosine"}[task.kind]


def no_reference(task: Task, best: float | None) -> None:
    """An unlabelled detector is measured against the float model's boxes at or above ``[task]
    score_threshold``; with none there is nothing to measure: a ConfigError (exit 2) naming the
    threshold and the best score the float model gave, never a silent fallback to cosine."""
    from ..errors import ConfigError

    seen = "no detection at all" if best is None else f"its best score is {best:.3g}"
    fix = (f"set [task] score_threshold below {best:.3g}" if best is not None and best > 0
           else "check the model and its evaluation data")
    raise ConfigError(f"[task] score_threshold = {task.score_threshold:g}: the float model detects nothing at or "
                      f"above it on the evaluation set ({seen}), so there is no reference to measure the "
                      "artifact against",
                      hint=f"{fix} in edgeforge.toml, or give the evaluation data labels "
                           "(gt_boxes, gt_classes, gt_counts)")


UserMetric = Callable[[list, list, Optional[dict]], tuple[float, float]]


def evaluate(task: Task, outputs: list, reference: list, labels: dict | None = None,
             user: UserMetric | None = None, user_name: str = "", figures_of: Callable = figures) -> dict:
    """The task record of ``outputs`` (the artifact's) against ``reference`` (the float
    model's). ``user(artifact outputs, float outputs, labels) -> (float, artifact)`` replaces
    the metric when ``[task] metric`` names one (``user_name``). ``figures_of``: the figures of
    raw outputs (:func:`figures`), or of [postprocess] answers (``post.answer_figures``)."""
    labelled = has_labels(task, labels)
    art = figures_of(task, outputs, reference, labels)
    flt = figures_of(task, reference, reference, labels)
    if task.kind == "detection" and user is None and flt.get("float_boxes") == 0:
        no_reference(task, flt.get("best_float_score"))
    name = primary(task, labelled)
    if user is not None:
        f_val, a_val = user(outputs, reference, labels if labelled else None)
        name = user_name or "metric"
    else:
        f_val, a_val = flt[name], art[name]
    if f_val is None or a_val is None:
        drop = None
    else:
        f_val, a_val = float(f_val), float(a_val)
        drop = round((f_val - a_val) * 100.0, 6)
    against_float = not labelled and user is None and task.kind in ("detection", "segmentation", "ctc")
    suffix = "_vs_float" if against_float else ""
    return {"kind": task.kind, "metric": name + suffix, "float": f_val, "artifact": a_val, "drop": drop,
            "labelled": labelled, "figures": {"float": flt, "artifact": art}}
