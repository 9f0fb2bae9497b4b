"""[task] kind = "detection": a tiny anchor-grid detector of real digits whose raw outputs
(boxes [N, A, 4], scores [N, C, A]) are post-processed on the host (NMS), built for linux-x86:
verify.task holds mAP@0.5 against the labels, and without labels the artifact's mAP@0.5
against the float model's own detections, with matched-box IoU and score error."""
from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgeforge import api

MODELS = Path(__file__).resolve().parents[1] / "task_models"


def detector_project(root: Path) -> Path:
    import paddle

    sys.path.insert(0, str(MODELS))
    try:
        import tiny_detector as det
    finally:
        sys.path.remove(str(MODELS))
    root.mkdir(parents=True)
    shutil.copy(MODELS / "tiny_detector.py", root / "tiny_detector.py")
    paddle.save(det.train(seconds=8).state_dict(), str(root / "det.pdparams"))
    (root / "data").mkdir()
    x, boxes, classes, counts = det.scenes(64, seed=5)
    np.savez(root / "data" / "calib.npz", x=det.scenes(64, seed=3)[0])
    np.savez(root / "data" / "eval.npz", x=x, gt_boxes=boxes, gt_classes=classes, gt_counts=counts)
    (root / "edgeforge.toml").write_text(textwrap.dedent("""
        name = "tiny-det"
        [model]
        factory = "tiny_detector:build"
        weights = "det.pdparams"
        [[model.inputs]]
        name = "x"
        shape = [-1, 1, 32, 32]
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        [task]
        kind = "detection"
        max_metric_drop = 10
        """))
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return detector_project(tmp_path_factory.mktemp("det") / "proj")


def test_map50_against_labels(project, tmp_path):
    m = api.build(project, "linux-x86", out=tmp_path / "int8").manifest
    t = m["verify"]["task"]
    assert (t["kind"], t["metric"], t["labelled"]) == ("detection", "map50", True)
    assert 0.3 < t["float"] <= 1.0 and 0.0 <= t["artifact"] <= 1.0
    assert t["drop"] == pytest.approx((t["float"] - t["artifact"]) * 100, abs=1e-4)
    assert t["figures"]["float"]["map50_95"] <= t["figures"]["float"]["map50"]
    assert m["accuracy_budget"]["criterion"] == "task:map50"


def test_without_labels_the_float_detections_are_the_truth(project, tmp_path):
    with np.load(project / "data" / "eval.npz") as z:
        x = z["x"]
    free = tmp_path / "free"
    shutil.copytree(project, free)
    np.savez(free / "data" / "eval.npz", x=x)
    t = api.build(free, "linux-x86", out=tmp_path / "out").manifest["verify"]["task"]
    assert (t["metric"], t["float"], t["labelled"]) == ("map50_vs_float", 1.0, False)
    art = t["figures"]["artifact"]
    assert art["float_boxes"] > 0 and 0 < art["matched"] <= art["float_boxes"]
    assert 0.5 <= art["matched_iou"] <= 1.0 and 0.0 <= art["score_error"] < 0.5
