"""matrix_nms in the graph for ONNX (issue 25; docs/export.md "NMS"): ONNX has no Matrix NMS and
paddle2onnx 2.1 no converter, so the graph paddle2onnx gets ends at the op's boxes and scores
(passes/pir_nms.py) and the runner's numpy matrix_nms (Paddle's CPU kernel) runs after it, on
the device and in verify. Its answers equal Paddle's kernel; the detector builds for linux-x86
(fp32, INT8) and jetson-orin, judged on detections (mAP@0.5) at batch 1 and 4."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from task_projects import detector_project

from edgeforge import api
from edgeforge.runner.postprocess import MatrixNmsSettings, matrix_nms, postprocess


@pytest.mark.parametrize("gaussian,normalized,background,keep_top_k,nms_top_k",
                         list(itertools.product([False, True], [True, False], [-1, 0], [5, 50], [-1, 10])))
def test_runner_matrix_nms_is_paddles_kernel(gaussian, normalized, background, keep_top_k, nms_top_k):
    import paddle
    from paddle.vision.ops import matrix_nms as paddle_matrix_nms

    rng = np.random.default_rng(keep_top_k + nms_top_k + 7 * background + 3 * gaussian + normalized + 8)
    n, c, a = 3, 3, 40
    xy = rng.uniform(0, 0.8 if normalized else 20, (n, a, 2))
    wh = rng.uniform(0.05 if normalized else 1, 0.3 if normalized else 8, (n, a, 2))
    boxes = np.concatenate([xy, xy + wh], -1).astype(np.float32)
    scores = rng.uniform(0, 1, (n, c, a)).astype(np.float32)
    want, counts, _ = paddle_matrix_nms(paddle.to_tensor(boxes), paddle.to_tensor(scores), 0.1, 0.05, nms_top_k,
                                        keep_top_k, use_gaussian=gaussian, gaussian_sigma=2.0,
                                        background_label=background, normalized=normalized, return_index=True,
                                        return_rois_num=True)
    rows, got_counts = matrix_nms(boxes, scores, MatrixNmsSettings(0.1, 0.05, nms_top_k, keep_top_k, gaussian, 2.0,
                                                                   background, normalized))
    assert got_counts.tolist() == counts.numpy().tolist()
    assert rows.shape == tuple(want.shape)
    np.testing.assert_allclose(rows, want.numpy(), rtol=0, atol=1e-5)
    post = postprocess([boxes, scores], {"op": "matrix_nms", "score_threshold": 0.1, "post_threshold": 0.05,
                                         "nms_top_k": nms_top_k, "keep_top_k": keep_top_k, "use_gaussian": gaussian,
                                         "background_label": background, "normalized": normalized})
    np.testing.assert_array_equal(post["rows"], rows)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return detector_project(tmp_path_factory.mktemp("matrix") / "proj", nms="matrix")


def test_onnx_fp32_ends_at_boxes_and_scores_and_matches_paddle(project, tmp_path):
    import json

    import onnx

    m = api.build(project, "linux-x86", precision="fp32", out=tmp_path / "fp32").manifest
    post = m["nms"]["postprocess"]
    assert m["nms"]["where"] == "postprocess" and post["op"] == "matrix_nms"
    # the program's own attributes (tiny_detector.build_with_nms)
    assert (post["nms_top_k"], post["keep_top_k"], post["normalized"], post["background_label"]) == (64, 32, False, -1)
    assert any(f["rewrite"] == "nms-to-postprocess" for f in m["converter_fixes"])
    graph = onnx.load(str(tmp_path / "fp32" / "model.onnx")).graph
    assert [len(o.type.tensor_type.shape.dim) for o in graph.output][:2] == [3, 3]     # boxes, scores
    v = m["verify"]
    assert v["status"] == "passed", v
    t = v["task"]
    assert (t["metric"], t["labelled"], t["postprocess"]) == ("map50", True, "matrix_nms")
    assert 0.3 < t["float"] <= 1.0 and t["artifact"] == pytest.approx(t["float"], abs=1e-6)
    assert [r["batch"] for r in v["batches"]["runs"]] == [1, 4]
    assert all(r["map50_vs_float"] == pytest.approx(1.0) for r in v["batches"]["runs"])
    doc = json.loads((tmp_path / "fp32" / "pipeline.json").read_text())
    assert doc["postprocess"]["op"] == "matrix_nms" and doc["postprocess"]["keep_top_k"] == 32


@pytest.mark.parametrize("target", ["linux-x86", "jetson-orin"])
def test_int8_builds_with_the_nms_on_the_device(project, tmp_path, target):
    m = api.build(project, target, out=tmp_path / target).manifest
    assert m["nms"]["postprocess"]["op"] == "matrix_nms"
    assert m["verify"]["status"] == "passed", m["verify"]
    t = m["verify"]["task"]
    assert t["drop"] <= 10.0 and t["artifact"] > 0.3
