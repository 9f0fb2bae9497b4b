"""ONNX INT8 for graphs onnxruntime's symbolic shape inference cannot finish.

A bilinear ``F.interpolate`` exports as a ``Resize`` whose output the symbolic pass leaves
without a shape; a ``paddle.concat`` with a skip connection then stops it ("Incomplete symbolic
shape inference", raised by ``quant_pre_process``). ``edgeforge.quant.onnx_ptq.pre_process``
retries with ``auto_merge`` and, failing that, without the symbolic pass; the manifest says which."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import tiny_project

from edgeforge import api

MODEL = """
import paddle
import paddle.nn as nn
import paddle.nn.functional as F


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.down = nn.Conv2D(1, 16, 3, stride=2, padding=1)
        self.skip = nn.Conv2D(1, 16, 3, padding=1)
        self.up = nn.Conv2DTranspose(16, 16, 2, stride=2)
        self.out = nn.Conv2D(48, 4, 3, padding=1)

    def forward(self, x):
        d = F.relu(self.down(x))
        u = {up}
        return self.out(paddle.concat([u, self.up(d), F.relu(self.skip(x))], axis=1))


def build():
    paddle.seed(0)
    return Net()
"""


def _project(root: Path, up: str) -> Path:
    return tiny_project(root, "resize-concat", MODEL.replace("{up}", up), [-1, 1, 16, 16])


@pytest.mark.parametrize("up, expected", [
    ('F.interpolate(d, scale_factor=2, mode="bilinear", align_corners=False)', "auto_merge"),
    ("self.up(d) * 0.5", "ok"),               # no Resize: the symbolic pass completes
], ids=["bilinear-resize", "no-resize"])
def test_onnx_int8_survives_incomplete_symbolic_shapes(tmp_path, monkeypatch, up, expected):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)        # onnxruntime's failed symbolic pass writes its temp file here
    res = api.build(_project(tmp_path / "proj", up), "linux-x86", out=tmp_path / "out")
    assert list(cwd.iterdir()) == []                          # nothing left in the user's directory
    pre = res.manifest["quantization"]["pre_process"]
    assert pre["symbolic_shape"] == expected, pre
    assert res.manifest["quantization"]["op_types"].startswith("onnxruntime default")   # no Softmax
    if expected != "ok":
        assert any("Incomplete symbolic shape inference" in e for e in pre["symbolic_errors"]), pre
    assert res.manifest["precision"] == "int8" and res.manifest["verify"]["status"] == "passed", res.manifest["verify"]


ATTENTION = """
import paddle
import paddle.nn as nn
import paddle.nn.functional as F


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(32)
        self.attn = nn.MultiHeadAttention(32, 4)
        self.fc1 = nn.Linear(32, 128)
        self.fc2 = nn.Linear(128, 32)

    def forward(self, x):
        t = x + self.attn(self.ln(x))
        return t + self.fc2(F.gelu(self.fc1(t)))


def build():
    paddle.seed(0)
    return Net()
"""


def test_attention_graph_quantizes_only_int8_kernel_ops(tmp_path):
    """The MatMuls (weights and attention products) are INT8; the decomposed LayerNorm and GELU
    get no Q/DQ (onnxruntime's default puts pairs inside them)."""
    import onnx

    from edgeforge.quant.onnx_ptq import INT8_KERNEL_OP_TYPES as ATTENTION_OP_TYPES

    root = tiny_project(tmp_path / "proj", "attention", ATTENTION, [-1, 8, 32])
    res = api.build(root, "linux-x86", out=tmp_path / "out")
    assert res.manifest["quantization"]["op_types"] == ATTENTION_OP_TYPES
    assert res.manifest["verify"]["status"] == "passed", res.manifest["verify"]
    graph = onnx.load(str(res.out_dir / "model.onnx")).graph
    producer = {o: n.op_type for n in graph.node for o in n.output}
    dq_readers = {n.op_type for n in graph.node
                  if any(producer.get(i) == "DequantizeLinear" for i in n.input)} - {"QuantizeLinear"}
    # (onnxruntime puts Q/DQ on a tensor: other readers of a MatMul's input read it dequantized)
    assert "MatMul" in dq_readers and not dq_readers & {"ReduceMean", "Sub", "Pow", "Sqrt", "Div", "Erf"}, dq_readers
