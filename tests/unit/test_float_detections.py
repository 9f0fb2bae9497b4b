"""verify of an fp32 detector with NMS in the graph judges detections, not NMS rows (issue 45:
PicoDet's fp32 build failed with "float output differs ... by 3.72e-01" on identical detections)."""
from __future__ import annotations

import numpy as np

from edgeforge.passes.verify_batches import FLOAT_MAP_DROP, float_detections, has_nms_rows
from edgeforge.runner.metrics import drift_metrics

# two images: 3 and 2 detections (class, score, x1, y1, x2, y2)
ROWS = np.array([[0, 0.91, 10, 10, 50, 50], [3, 0.80, 60, 60, 120, 120], [3, 0.80, 130, 20, 180, 70],
                 [1, 0.70, 5, 100, 60, 160], [2, 0.55, 100, 100, 150, 150]], "float32")
COUNTS = np.array([3, 2], "int32")


def test_reordered_rows_with_equal_scores_pass():
    """The rows of equal scores in another order: a tensor comparison sees a large error, the
    detections are the same."""
    got = ROWS[[0, 2, 1, 3, 4]]
    rel = drift_metrics([got, COUNTS], [ROWS, COUNTS])["outputs"][0]["rel_max_abs_error"]
    assert rel > 0.3
    rec = float_detections([got, COUNTS], [ROWS, COUNTS], 0.5)
    assert rec["status"] == "passed" and rec["map50_vs_float"] == 1.0, rec
    assert rec["matched"] == rec["float_boxes"] == 5 and rec["score_error"] == 0.0


def test_a_lost_box_fails_with_the_figures():
    got, counts = ROWS[[0, 1, 3, 4]], np.array([2, 2], "int32")
    rec = float_detections([got, counts], [ROWS, COUNTS], 0.5)
    assert rec["status"] == "failed" and rec["drop"] > FLOAT_MAP_DROP
    assert "mAP@0.5 vs float" in rec["reason"] and rec["matched"] == 4


def test_a_score_error_beyond_fp32_rounding_fails():
    got = ROWS.copy()
    got[:, 1] -= 0.01
    rec = float_detections([got, COUNTS], [ROWS, COUNTS], 0.5)
    assert rec["status"] == "failed" and rec["map50_vs_float"] == 1.0 and rec["score_error"] > 1e-3


def test_no_sure_float_box_means_none_from_the_artifact():
    low = ROWS.copy()
    low[:, 1] = 0.2
    assert float_detections([low, COUNTS], [low, COUNTS], 0.5)["status"] == "passed"
    rec = float_detections([ROWS, COUNTS], [low, COUNTS], 0.5)
    assert rec["status"] == "failed" and rec["artifact_boxes"] == 5


def test_only_rows_and_counts_are_nms_rows():
    assert has_nms_rows([ROWS, COUNTS])
    assert not has_nms_rows([np.zeros((2, 16, 4)), np.zeros((2, 3, 16))])


def _detector(batch_dependent: bool):
    """A predictor whose detections are a function of each image (its mean picks the box),
    or, ``batch_dependent``, also of the batch size (the bug verify.batches is for)."""
    def run(feeds):
        x = feeds["x"]
        rows = [[float(int(m) % 2), 0.9, 10 * m, 10, 10 * m + 40, 50] for m in x.reshape(len(x), -1).mean(1)]
        if batch_dependent and len(x) == 1:
            rows = [[r[0], r[1], r[2] + 30, r[3] + 30, r[4] + 30, r[5] + 30] for r in rows]
        return [np.array(rows, "float32"), np.ones(len(x), "int32")]
    return run


def test_int8_batches_are_judged_against_the_artifact_at_one_batch():
    from edgeforge.passes.verify_batches import detection_batches
    from edgeforge.runner.predictors import predict_all
    from edgeforge.task.evaluate import detections

    feeds = {"x": np.arange(16, dtype="float32").reshape(16, 1, 1, 1)}
    for dependent, status in ((False, "passed"), (True, "failed")):
        run = _detector(dependent)
        rec = detection_batches(run, feeds, lambda sub, run=run: predict_all(run, sub, 16),
                                lambda o, f: detections(o), 10.0, 0.5, truth_is_float=False)
        assert rec["status"] == status and rec["against"] == "artifact", rec
    assert "at batch 1" in rec["reason"] and "its own at batch 16" in rec["reason"]
