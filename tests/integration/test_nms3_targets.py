"""A detector with PaddleDetection's multiclass_nms3 in the graph (issue 25) for rpi4 (Paddle
Lite), linux-x86 (ONNX, NMS in the graph at any batch) and jetson-orin (ONNX for TensorRT:
the NMS moved out of the graph into the runner's post-processing). verify compares
detections (mAP@0.5), and on the host at batch 1 and batch 4 (verify.batches)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from task_projects import detector_project

from edgeforge import api


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return detector_project(tmp_path_factory.mktemp("nms3") / "proj", nms="multiclass")


def _batches_ok(m):
    b = m["verify"]["batches"]
    assert b["status"] == "passed", b
    assert [r["batch"] for r in b["runs"]] == [1, 4]
    for r in b["runs"]:
        assert r["matched"] > 0 and r["map50_vs_float"] >= 0.9, r


@pytest.mark.needs_lite
def test_rpi4_lite_takes_the_legacy_op(project, tmp_path):
    m = api.build(project, "rpi4", out=tmp_path / "rpi4").manifest
    exp = m["export"]
    assert exp["route"] == "legacy" and exp["legacy_api_patch"]["used"]["multiclass_nms3"] == 1
    assert m["artifact"]["path"] == "model.nb" and (tmp_path / "rpi4" / "model.nb").stat().st_size > 0
    t = m["verify"]["task"]
    assert (t["kind"], t["metric"], t["labelled"]) == ("detection", "map50", True) and t["float"] > 0.3


@pytest.mark.needs_lite
def test_lite_x86_runs_the_op(project, tmp_path):
    """The same op under Paddle Lite's x86 runtime on the host: rows and counts, and the
    detections Paddle Inference finds (fp32)."""
    m = api.build(project, "linux-x86", backend="lite", precision="fp32", out=tmp_path / "lite").manifest
    t = m["verify"]["task"]
    assert m["verify"]["status"] == "passed", m["verify"].get("reason")
    assert t["metric"] == "map50" and t["artifact"] == pytest.approx(t["float"], abs=1e-6)


def test_linux_x86_int8_keeps_nms_in_the_graph(project, tmp_path):
    m = api.build(project, "linux-x86", out=tmp_path / "x86").manifest
    assert m["verify"]["status"] == "passed", m["verify"].get("reason")
    assert {"rewrite": "multiclass-nms-batched", "nodes": 1} in m["converter_fixes"]
    assert m["nms"] is None and m["quantization"]["op_types"] == ["Conv", "ConvTranspose", "MatMul", "Gemm"]
    t = m["verify"]["task"]
    assert t["metric"] == "map50" and t["drop"] <= 10
    _batches_ok(m)


def test_jetson_orin_runs_nms_after_the_graph(project, tmp_path):
    import onnx

    out = tmp_path / "orin"
    m = api.build(project, "jetson-orin", out=out).manifest
    assert m["verify"]["status"] == "passed", m["verify"].get("reason")
    post = m["nms"]["postprocess"]
    assert m["nms"]["where"] == "postprocess"
    assert post == {"op": "nms", "boxes": 0, "scores": 1, "score_threshold": 0.05, "iou_threshold": 0.5,
                    "keep_top_k": 32, "nms_top_k": 64, "normalized": True, "background_label": -1, "nms_eta": 1.0}
    graph = onnx.load(str(out / "model.onnx")).graph
    assert "NonMaxSuppression" not in {n.op_type for n in graph.node}
    assert len(graph.output) == 2
    assert json.loads((out / "pipeline.json").read_text())["postprocess"]["op"] == "nms"
    t = m["verify"]["task"]
    assert t["postprocess"] == "nms" and t["settings"]["postprocess"] == post
    assert t["settings"]["float_nms_in_graph"] is True and t["drop"] <= 10
    _batches_ok(m)


def test_jetson_orin_fp32_device_nms_is_paddles(project, tmp_path):
    """fp32: the graph without its NMS + the runner's NMS find what Paddle's multiclass_nms3 finds."""
    m = api.build(project, "jetson-orin", precision="fp32", out=tmp_path / "fp32").manifest
    t = m["verify"]["task"]
    assert m["verify"]["status"] == "passed", m["verify"].get("reason")
    assert t["artifact"] == pytest.approx(t["float"], abs=1e-6)
    for r in m["verify"]["batches"]["runs"]:
        assert r["map50_vs_float"] == pytest.approx(1.0) and r["matched_iou"] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("normalized,background,top_k,eta", [(True, -1, -1, 1.0), (False, 0, 5, 1.0),
                                                             (True, -1, 8, 0.7)])
def test_runner_nms_matches_paddles_kernel(normalized, background, top_k, eta):
    import paddle

    from edgeforge.runner.postprocess import NmsSettings, nms

    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 40, (3, 30, 2)).astype("float32")
    boxes = np.concatenate([xy, xy + rng.uniform(4, 16, (3, 30, 2)).astype("float32")], -1)
    scores = rng.uniform(0, 1, (3, 3, 30)).astype("float32")
    out, _, num = paddle._C_ops.multiclass_nms3(paddle.to_tensor(boxes), paddle.to_tensor(scores), None, 0.3, top_k,
                                                12, 0.45, normalized, eta, background)
    rows, counts = nms(boxes, scores, NmsSettings(0.3, 0.45, 12, top_k, normalized, background, eta))
    np.testing.assert_array_equal(counts, num.numpy())
    want, start = out.numpy(), 0
    for k in counts:              # per image the same rows (Paddle orders them by class)
        got = sorted(map(tuple, np.round(rows[start:start + k], 5)))
        assert got == sorted(map(tuple, np.round(want[start:start + k], 5)))
        start += k


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_jetson_orin_without_a_task_is_judged_by_its_detections(project, tmp_path, precision):
    """No [task] and no box labels: the task was generic (judged by cosine), and verify read a
    cosine the NMS answers do not have (`pass verify: KeyError: 'cosine'`, issue 45). The
    outputs go through the runner's NMS, so the answers are detections: mAP@0.5 vs float."""
    root = tmp_path / "notask"
    shutil.copytree(project, root)
    toml = (root / "edgeforge.toml").read_text()
    (root / "edgeforge.toml").write_text(toml[:toml.index("[task]")])
    ev = dict(np.load(root / "data" / "eval.npz"))
    np.savez(root / "data" / "eval.npz", x=ev["x"])
    m = api.build(root, "jetson-orin", precision=precision, out=tmp_path / "out").manifest
    v, t = m["verify"], m["verify"]["task"]
    assert (t["kind"], t["metric"], t["postprocess"]) == ("detection", "map50_vs_float", "nms"), t
    assert [r["batch"] for r in v["batches"]["runs"]] == [1, 4]
    if precision == "fp32":
        assert v["status"] == "passed" and t["drop"] == 0, v.get("reason")
    else:
        assert t["drop"] is not None and (v["status"] == "passed" or "map50" in v["reason"]), v
