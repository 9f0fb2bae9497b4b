"""verify at batch 1 and 4 for outputs whose size depends on the data (``verify.batches``).

A detector with NMS in the graph gives rows ``[M, 6]`` for the whole batch plus per-image
counts ``[N]``; a converter that assumes batch 1 (paddle2onnx 2.1's ``multiclass_nms3`` tail,
docs/export.md "NMS") breaks only at a larger batch, and a tensor comparison cannot see it
(the rows differ in number). So the artifact runs the first evaluation images again at batch 1
and at batch 4 and each run's detections are matched against the float program's on the same
images (mAP@0.5 with the float detections as the truth, matched-box IoU, score error).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

BATCHES = (1, 4)
SAMPLES = 16


def detection_batches(run: Callable, feeds: dict, float_outputs: Callable, answers: Callable,
                      limit: float, score_threshold: float, truth_is_float: bool = True) -> dict:
    """``run``: the artifact's predictor; ``float_outputs(feeds)``: the truth's outputs, the
    float program's (``truth_is_float``; fp32) or the artifact's own at the whole sample as
    one batch (INT8: quantization moves detections off the float model's, which the task
    metric judges; this check is about the batch size); ``answers(outputs, is_float)``:
    outputs -> detections per image (through the runner's post-processing where there is one).
    Fails (``status``) when the mAP@0.5 against the truth at a batch is more than ``limit``
    points below 100."""
    from ..runner.predictors import predict_all
    from ..task.detection import against_float

    n = min(SAMPLES, len(next(iter(feeds.values()))))
    sub = {k: v[:n] for k, v in feeds.items()}
    truth = answers(float_outputs(sub), truth_is_float)
    against = "the float model's" if truth_is_float else f"its own at batch {n}"
    rows, worst = [], None
    for batch in BATCHES:
        got = answers(predict_all(run, sub, batch), False)
        fig = against_float(got, truth, score_threshold)
        if fig["map50"] is None:              # the float model found nothing that sure here
            rows.append({"batch": batch, "samples": n, "map50_vs_float": None, "drop": None,
                         "skipped": f"no float detection scores {score_threshold:g} or more"})
            continue
        drop = round((1.0 - fig["map50"]) * 100.0, 4)
        rows.append({"batch": batch, "samples": n, "map50_vs_float": round(fig["map50"], 6), "drop": drop,
                     **{k: fig[k] for k in ("matched", "float_boxes", "matched_iou", "score_error") if k in fig}})
        if drop > limit and (worst is None or drop > worst["drop"]):
            worst = rows[-1]
    record = {"status": "passed" if worst is None else "failed", "against": "float" if truth_is_float else "artifact",
              "runs": rows}
    if worst is not None:
        record["reason"] = (f"at batch {worst['batch']} the detections differ from {against}: "
                            f"mAP@0.5 {worst['map50_vs_float']:.3f} (drop {worst['drop']:.2f} > {limit:g})")
    return record


def per_image(answers: dict) -> list[np.ndarray]:
    from ..task.detection import split

    return split(answers["rows"], answers["counts"])


FLOAT_MAP_DROP = 0.5        # points of mAP@0.5 against the float detections an fp32 artifact may lose
FLOAT_SCORE_ERROR = 1e-3    # mean |score - float score| over the matched boxes, fp32


def has_nms_rows(outputs: list) -> bool:
    """Rows ``[M, 6]`` + counts ``[N]``: NMS in the graph, a data-dependent number of rows."""
    arrs = [np.asarray(o) for o in outputs]
    return any(a.ndim == 2 and a.shape[1] == 6 for a in arrs) and any(a.ndim == 1 for a in arrs)


def float_detections(outs: list, reference: list, score_threshold: float) -> dict:
    """``verify.detections`` of an fp32 detector with NMS in the graph: the artifact's
    detections against the float program's (those scoring ``score_threshold`` or more are the
    truth): mAP@0.5, matched boxes, their IoU and score error. NMS rows are not compared
    element by element: their order among equal scores and their padding are not the answer."""
    from ..task.detection import against_float
    from ..task.evaluate import detections

    got, truth = detections(outs), detections(reference)
    fig = against_float(got, truth, score_threshold)
    rec = {"score_threshold": score_threshold, "map50_vs_float": fig["map50"],
           **{k: fig[k] for k in ("matched", "float_boxes", "matched_iou", "score_error")}}
    if fig["map50"] is None:          # the float model is that sure of nothing: neither may the artifact be
        extra = sum(int((d[:, 1] >= score_threshold).sum()) for d in got)
        rec.update(status="passed" if extra == 0 else "failed", artifact_boxes=extra)
        if extra:
            rec["reason"] = (f"the float program finds no box scoring {score_threshold:g} or more; "
                             f"the artifact finds {extra}")
        return rec
    drop = round((1.0 - fig["map50"]) * 100.0, 4)
    err = fig["score_error"] or 0.0
    rec.update(drop=drop, status="passed" if drop <= FLOAT_MAP_DROP and err <= FLOAT_SCORE_ERROR else "failed")
    if rec["status"] == "failed":
        rec["reason"] = (f"the detections differ from Paddle Inference's: mAP@0.5 vs float {fig['map50']:.3f} "
                         f"(drop {drop:.2f}, at most {FLOAT_MAP_DROP:g}), matched-box score error {err:.2e} "
                         f"(at most {FLOAT_SCORE_ERROR:g})")
    return rec
