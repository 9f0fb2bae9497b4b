"""Recurrent layers and the two program routes (issue 25, docs/export.md "Program routes").

A 2-layer bidirectional ``nn.LSTM`` (as in a CRNN) and an ``nn.GRU``: the ONNX targets export
the PIR program and convert it with paddle2onnx 2.1; Paddle Lite gets the legacy program (the
``_dropout_state`` fix and the fill-constant-0d rewrite of its initial states). Every host-runnable
float build is verified against Paddle Inference; INT8 keeps the recurrent op in float.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import tiny_project

from edgeforge import api
from edgeforge.paddle_env import paddle_inference

_SRC = textwrap.dedent("""
    import paddle
    from paddle import nn


    class Net(nn.Layer):
        def __init__(self, kind):
            super().__init__()
            if kind == "lstm":
                self.rnn = nn.LSTM(16, 24, num_layers=2, direction="bidirect")
                width = 48
            else:
                self.rnn = nn.GRU(16, 24)
                width = 24
            self.fc = nn.Linear(width, 10)

        def forward(self, x):
            y, _ = self.rnn(x)
            return self.fc(y[:, -1])


    def build():
        paddle.seed(0)
        return Net("{kind}")
    """)


@pytest.fixture(scope="module", params=["lstm", "gru"])
def rnn_project(request, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp(request.param) / "p"
    return tiny_project(root, request.param, _SRC.format(kind=request.param), [-1, 12, 16])


def test_onnx_takes_the_pir_route_and_verifies(rnn_project, tmp_path):
    result = api.build(rnn_project, "linux-x86", out=tmp_path / "fp32", precision="fp32")
    export = result.manifest["export"]
    assert export["route"] == "pir" and "model.json" in export["program"], export
    assert "route_fallback" not in export
    assert result.verify_status == "passed", result.manifest["verify"]
    assert result.manifest["verify"]["rel_max_abs_error"] < 1e-5


def test_jetson_int8_keeps_the_recurrent_op_in_float(rnn_project, tmp_path):
    import onnx

    result = api.build(rnn_project, "jetson-orin", out=tmp_path / "int8")
    assert result.manifest["precision"] == "int8"
    assert result.verify_status == "passed", result.manifest["verify"]
    model = onnx.load(str(result.out_dir / "model.onnx"))
    ops = {n.op_type for n in model.graph.node}
    assert ops & {"LSTM", "GRU"} and "QuantizeLinear" in ops       # the Linear is INT8, the RNN float


@pytest.mark.needs_lite
def test_lite_takes_the_legacy_program(rnn_project, tmp_path):
    arm = api.build(rnn_project, "rpi4", out=tmp_path / "arm", precision="fp32")
    assert arm.manifest["export"]["route"] == "legacy"
    assert arm.manifest["export"]["legacy_api_patch"]["rnn_dropout_states"] == 1
    assert (arm.out_dir / "model.nb").stat().st_size > 0
    x86 = api.build(rnn_project, "linux-x86", out=tmp_path / "x86", backend="lite", precision="fp32")
    assert x86.verify_status == "passed", x86.manifest["verify"]
    assert x86.manifest["verify"]["rel_max_abs_error"] < 1e-5


def test_the_legacy_program_equals_the_pir_program(rnn_project, tmp_path):
    """Both routes' programs give the dygraph model's outputs (Paddle Inference on each)."""
    from edgeforge.passes.export import export_model

    x = np.random.default_rng(1).normal(size=(5, 12, 16)).astype("float32")
    spec = [{"name": "x", "shape": [-1, 12, 16], "dtype": "float32"}]
    outs = {}
    for route in ("legacy", "pir"):
        d = tmp_path / route
        d.mkdir()
        meta = export_model(str(rnn_project), "model:build", None, spec, str(d), route)["ok"]
        assert meta["export"]["route"] == route
        outs[route] = paddle_inference(d, {"x": x})[0]
    np.testing.assert_allclose(outs["legacy"], outs["pir"], rtol=1e-5, atol=1e-6)
