"""``[postprocess]``: the model's outputs -> the task's answers (classes, text, boxes), run by
the runner's :func:`~edgeforge.runner.postprocess.postprocess` on the host (verify) and on
the device (bench), so the answers both places compare come from one implementation.

:func:`resolve` gives the op as pipeline.json holds it (``[task]``'s blank and time axis filled
in; without a ``[postprocess]``, the task kind's usual one, for bench --end-to-end's
post-processing stage). :func:`answer_figures` is :func:`.evaluate.figures` over answers.
"""
from __future__ import annotations

import numpy as np

from . import detection as det
from . import metrics as m
from .evaluate import Task, has_labels

KIND_OF_OP = {"topk": "classification", "ctc_greedy": "ctc", "nms": "detection", "matrix_nms": "detection"}
DEFAULT_OP = {"classification": "topk", "ctc": "ctc_greedy"}


def resolve(post: dict | None, task: dict | None) -> dict:
    """The pipeline.json post-processing op of a ``[postprocess]`` (as a dict, or None) under
    ``[task]`` (as a dict, or None)."""
    task = task or {}
    if post is None:
        op = DEFAULT_OP.get(task.get("kind", "classification") if task else "none", "none")
        post = {"op": op, "output": 0, "k": task.get("top_k", 5)}
    out = {k: v for k, v in post.items() if v is not None}
    if out["op"] == "ctc_greedy":
        out.setdefault("blank", task.get("blank", 0))
        out.setdefault("time_axis", task.get("time_axis", 1))
    keep = {"none": (), "topk": ("output", "k", "softmax"), "ctc_greedy": ("output", "blank", "time_axis"),
            "nms": ("boxes", "scores", "score_threshold", "iou_threshold", "keep_top_k", "nms_top_k", "normalized",
                    "background_label", "nms_eta"),
            "matrix_nms": ("boxes", "scores", "score_threshold", "post_threshold", "nms_top_k", "keep_top_k",
                           "use_gaussian", "gaussian_sigma", "background_label", "normalized")}[out["op"]]
    return {"op": out["op"], **{k: out[k] for k in keep if k in out}}


def check(post: dict, kind: str) -> str | None:
    """Why ``post`` cannot serve a ``[task] kind``, or None."""
    want = KIND_OF_OP.get(post["op"])
    if want is not None and want != kind:
        return (f"[postprocess] op = \"{post['op']}\" gives a {want} task's answers; [task] kind is "
                f"\"{kind}\"")
    return None


def against_outputs(spec, shapes: list) -> str | None:
    """Why the project's ``[postprocess]`` (or ``[task] kind = "ctc"``'s blank) cannot read the
    model's outputs (``shapes``: export's probe, one shape per output), or None: found right
    after export, before quantize (exit 2 naming the key)."""
    task = spec.task.model_dump() if spec.task is not None else None
    post = spec.postprocess.model_dump() if spec.postprocess is not None else None
    if post is None and (task or {}).get("kind") != "ctc":
        return None
    op = resolve(post, task)
    mismatch = check(op, task["kind"]) if task and task.get("kind") else None
    if mismatch:                # the op serves another task: that comes first, whatever the indices
        return mismatch
    n = len(shapes)
    keys = {"topk": ("output",), "ctc_greedy": ("output",), "nms": ("boxes", "scores"),
            "matrix_nms": ("boxes", "scores")}.get(op["op"], ())
    for key in keys:
        if op.get(key, 0) >= n:
            return (f"[postprocess] {key} = {op[key]}, but the model has {n} output(s) "
                    f"(0..{n - 1})")
    if op["op"] == "ctc_greedy":
        shape = shapes[op.get("output", 0)]
        classes = shape[-1] if len(shape) == 3 else None
        if isinstance(classes, int) and classes > 0 and op["blank"] >= classes:
            where = "[postprocess] blank" if (post or {}).get("blank") is not None else "[task] blank"
            return (f"{where} = {op['blank']}, but output {op.get('output', 0)} {list(shape)} has "
                    f"{classes} classes (0..{classes - 1})")
    if op["op"] in ("nms", "matrix_nms"):
        box = shapes[op["boxes"]]
        if len(box) != 3 or box[-1] not in (4, -1, None):
            return f"[postprocess] boxes = {op['boxes']}: output {op['boxes']} is {list(box)}, not boxes [N, A, 4]"
    return None


def answer_figures(task: Task, answers: dict, reference: dict, labels: dict | None) -> dict:
    """The task's figures from answers (``runner.postprocess``'s dicts): against ``labels`` when
    there are any, else against ``reference`` (the float model's answers)."""
    lab = labels if has_labels(task, labels) else None
    if "classes" in answers:
        top = np.asarray(answers["classes"])
        if lab is None:
            return {"top1_agreement": float(np.mean(top[:, 0] == np.asarray(reference["classes"])[:, 0]))}
        y = np.asarray(lab["labels"]).reshape(-1)
        k = min(task.top_k, top.shape[1])
        return {"top1": float(np.mean(top[:, 0] == y)),
                f"top{task.top_k}": float(np.mean(np.any(top[:, :k] == y[:, None], axis=1)))}
    if "text" in answers:
        truth = m.unpad(lab["labels"]) if lab is not None else m.unpad(reference["text"])
        return m.sequence_scores(m.unpad(answers["text"]), truth)
    if "rows" in answers:
        dets = det.split(answers["rows"], answers["counts"])
        if lab is None:
            return det.against_float(dets, det.split(reference["rows"], reference["counts"]),
                                     task.score_threshold)
        return det.detection_scores(dets, det.ground_truth(lab["gt_boxes"], lab["gt_classes"], lab["gt_counts"]))
    raise ValueError(f"answers of an unknown kind ({', '.join(sorted(answers))})")


def nms_rows(outputs: list) -> dict:
    """The answers of a program with NMS in it (rows [M, 6] + counts [N]), as the runner's
    ``nms`` op gives them: the float model's, when the artifact's NMS was moved out of its
    graph (``[backend.onnx] nms = "postprocess"``)."""
    arrs = [np.asarray(o) for o in outputs]
    rows = next((a for a in arrs if a.ndim == 2 and a.shape[1] == 6), None)
    counts = next((a for a in arrs if a.ndim == 1), None)
    if rows is None or counts is None:
        raise ValueError("the float program gives no NMS rows [M, 6] + counts [N]: "
                         + ", ".join(str(list(a.shape)) for a in arrs))
    return {"rows": rows, "counts": counts.astype(np.int32)}


def answers_of(outputs: list, post: dict) -> dict:
    """The runner's post-processing of ``outputs`` (the same code the device runs)."""
    from ..runner.postprocess import postprocess

    return postprocess(outputs, post)
