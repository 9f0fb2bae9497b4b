"""multiclass_nms3 in the graph, ONNX at any batch size (docs/export.md 19): paddle2onnx 2.1's
batch-1 tail is rewritten (passes/onnx_nms.py); the ONNX rows equal Paddle's at batch 1 and 4."""
from __future__ import annotations

import numpy as np
from helpers import tiny_project

from edgeforge import api

DETECTOR = """
import paddle
import paddle.nn as nn
import paddle.nn.functional as F


class Det(nn.Layer):
    def __init__(self):
        super().__init__()
        self.body = nn.Conv2D(3, 8, 3, stride=2, padding=1)
        self.cls = nn.Conv2D(8, 3, 1)
        self.reg = nn.Conv2D(8, 4, 1)

    def forward(self, x):
        f = F.relu(self.body(x))
        s = F.sigmoid(self.cls(f)).flatten(2)
        r = self.reg(f).flatten(2).transpose([0, 2, 1])
        g = paddle.arange(4, dtype="float32")
        ctr = paddle.stack(paddle.meshgrid(g, g), -1).reshape([1, 16, 2]) * 8 + 4
        wh = F.softplus(r[:, :, 2:]) * 8
        xy = ctr + r[:, :, :2]
        boxes = paddle.concat([xy - wh / 2, xy + wh / 2], -1)
        out, _, num = paddle._C_ops.multiclass_nms3(boxes, s, None, 0.3, 100, 20, 0.5, True, 1.0, -1)
        return out, num


def build():
    paddle.seed(0)
    return Det()
"""


def test_multiclass_nms3_runs_in_onnx_at_batch_1_and_4(tmp_path):
    from edgeforge.paddle_env import paddle_inference
    from edgeforge.runner.predictors import onnx_predictor

    root = tiny_project(tmp_path / "p", "nms-det", DETECTOR, [-1, 3, 8, 8], samples=8)
    res = api.build(root, "linux-x86", out=tmp_path / "o", precision="fp32")
    assert res.manifest["export"]["route"] == "pir", res.manifest["export"]
    assert {"rewrite": "multiclass-nms-batched", "nodes": 1} in res.manifest["converter_fixes"]
    assert res.verify_status == "passed", res.manifest["verify"]
    run = onnx_predictor(res.out_dir / "model.onnx")
    from edgeforge.passes.export import export_model

    float_dir = tmp_path / "float"
    float_dir.mkdir()
    spec = [{"name": "x", "shape": [-1, 3, 8, 8], "dtype": "float32"}]
    assert export_model(str(root), "model:build", None, spec, str(float_dir), "pir")["ok"]["export"]["route"] == "pir"
    for batch in (1, 4):
        x = np.random.default_rng(batch).normal(size=(batch, 3, 8, 8)).astype("float32")
        rows, counts = run({"x": x})
        assert counts.shape == (batch,) and int(counts.sum()) == len(rows) and rows.shape[1] == 6
        assert (counts == 20).all()                 # keep_top_k per image, not per batch
        want = paddle_inference(float_dir, {"x": x})
        np.testing.assert_allclose(rows, want[0], atol=1e-5)       # same rows, same order
        np.testing.assert_array_equal(counts, want[1])
