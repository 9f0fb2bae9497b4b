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
                      limit: float, score_threshold: float) -> dict:
    """``run``: the artifact's predictor; ``float_outputs(feeds)``: the float program's outputs;
    ``answers(outputs, is_float)``: outputs -> detections per image (through the runner's
    post-processing where there is one). Fails (``status``) when the mAP@0.5 against the
    float detections at a batch is more than ``limit`` points below 100."""
    from ..runner.edgeforge_runner import predict_all
    from ..task.detection import against_float

    n = min(SAMPLES, len(next(iter(feeds.values()))))
    sub = {k: v[:n] for k, v in feeds.items()}
    truth = answers(float_outputs(sub), True)
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
    record = {"status": "passed" if worst is None else "failed", "runs": rows}
    if worst is not None:
        record["reason"] = (f"at batch {worst['batch']} the detections differ from the float model's: "
                            f"mAP@0.5 vs float {worst['map50_vs_float']:.3f} (drop {worst['drop']:.2f} > {limit:g})")
    return record


def per_image(answers: dict) -> list[np.ndarray]:
    from ..task.detection import split

    return split(answers["rows"], answers["counts"])
