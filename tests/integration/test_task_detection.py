"""[task] kind = "detection": a tiny anchor-grid detector of real digits whose raw outputs
(boxes [N, A, 4], scores [N, C, A]) are post-processed on the host (NMS), built for linux-x86:
verify.task holds mAP@0.5 against the labels, and without labels the artifact's mAP@0.5
against the float model's own detections, with matched-box IoU and score error. With
matrix_nms in the graph (Paddle Lite here; ONNX: test_matrix_nms.py) the artifact gives
the rows and counts itself."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from task_projects import detector_project

from edgeforge import api


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


@pytest.mark.needs_lite
def test_nms_in_the_graph_lite_rows_and_counts(tmp_path):
    """matrix_nms in the graph (rows [M, 6] + counts [N], the multiclass_nms3 layout) builds
    for linux-x86 with Paddle Lite: mAP@0.5 in verify.task from the artifact's own NMS."""
    root = detector_project(tmp_path / "proj", nms=True)
    m = api.build(root, "linux-x86", backend="lite", precision="fp32", out=tmp_path / "lite").manifest
    t = m["verify"]["task"]
    assert m["verify"]["status"] == "passed"
    assert (t["kind"], t["metric"], t["labelled"]) == ("detection", "map50", True)
    assert 0.3 < t["float"] <= 1.0 and t["artifact"] == pytest.approx(t["float"], abs=0.02)


def test_no_float_box_above_the_threshold_stops_with_exit_2(project, tmp_path, capsys):
    """An unlabelled detector with [task] score_threshold above every float score: exit 2, one
    line naming score_threshold and the best score seen (issue 46)."""
    from edgeforge.cli import main

    with np.load(project / "data" / "eval.npz") as z:
        x = z["x"]
    free = tmp_path / "free"
    shutil.copytree(project, free)
    np.savez(free / "data" / "eval.npz", x=x)
    toml = free / "edgeforge.toml"
    toml.write_text(toml.read_text().replace('kind = "detection"', 'kind = "detection"\nscore_threshold = 1.0'))
    assert main(["build", str(free), "--target", "linux-x86", "--out", str(tmp_path / "out")]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error: [task] score_threshold = 1:"), err   # nothing native
    assert "best score is" in err[0] and "cosine" not in err[0]
