"""Legacy export of the APIs Paddle 3.2+ routes to PIR-only C++ bindings (docs/export.md).

Each op of the list in docs/legalize-findings.md exports to a legacy program that holds the
legacy operator and that Paddle Inference runs with the dygraph model's numbers; a model made
of all of them builds for Paddle Lite arm and x86 and for ONNX, and the artifacts match Paddle
Inference. The patch is gone after the export and stays off when its guard does not hold."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import tiny_project

from edgeforge.paddle_env import import_paddle, paddle_inference
from edgeforge.passes import export_compat

# API call on y (a [N, 8, 16] float tensor) -> the legacy operator it must export as
OPS = {
    "F.sigmoid(y)": "sigmoid",
    "paddle.tanh(y)": "tanh",
    "F.gelu(y)": "gelu",
    "F.gelu(y, approximate=True)": "gelu",
    "F.softplus(y, beta=2.0)": "softplus",
    "paddle.sum(y, axis=-1, keepdim=True)": "reduce_sum",
    "paddle.matmul(y, y, transpose_y=True)": "matmul_v2",
    "paddle.abs(y)": "abs",
    "paddle.argmax(y, axis=-1)": "arg_max",
    "paddle.maximum(y, y * 0.5)": "elementwise_max",
    "paddle.multiply(y, y)": "elementwise_mul",
    "y.sigmoid().sum(axis=1)": "reduce_sum",        # Variable methods are the bindings too
    "nn.MultiHeadAttention(16, 2)(y, y, y)": "matmul_v2",
}


def _layer(expr: str, where: Path):
    """A layer whose forward is ``expr`` (dy2static reads the source: it goes to a file)."""
    import importlib.util

    mha = "nn.MultiHeadAttention(16, 2)"
    src = textwrap.dedent(f"""
        import paddle
        import paddle.nn as nn
        import paddle.nn.functional as F


        class Net(nn.Layer):
            def __init__(self):
                super().__init__()
                self.mha = {mha if mha in expr else "None"}

            def forward(self, y):
                return {expr.replace(mha, "self.mha")}
        """)
    path = where / "op_model.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"op_model_{abs(hash(str(where)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net = module.Net()
    net.eval()
    return net


@pytest.mark.parametrize("expr", list(OPS))
def test_api_exports_as_its_legacy_op_with_the_same_numbers(expr, tmp_path):
    paddle = import_paddle()
    paddle.disable_static()
    paddle.seed(0)
    layer = _layer(expr, tmp_path)
    x = np.random.default_rng(0).normal(size=(3, 8, 16)).astype("float32")
    want = layer(paddle.to_tensor(x)).numpy()
    spec = [paddle.static.InputSpec([None, 8, 16], "float32", "x")]
    with export_compat.legacy_apis() as status:
        paddle.jit.save(layer, str(tmp_path / "model"), input_spec=spec)
    assert status["enabled"] and status["used"], status
    assert isinstance(paddle._C_ops.sigmoid, type(len)), "the patch outlived the export"
    with open(tmp_path / "model.pdmodel", "rb") as fh:
        assert OPS[expr].encode() in fh.read()
    got = paddle_inference(tmp_path, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_patch_stays_off_when_the_guard_does_not_hold(tmp_path, monkeypatch):
    paddle = import_paddle()
    paddle.disable_static()
    monkeypatch.setattr(export_compat, "_KNOWN_ROUTING_SHA256", {})
    spec = [paddle.static.InputSpec([None, 8, 16], "float32", "x")]
    with export_compat.legacy_apis() as status:
        assert paddle.sigmoid is not None and not status["enabled"]
        with pytest.raises(TypeError, match="must be Value, but got Variable"):
            paddle.jit.save(_layer("F.sigmoid(y)", tmp_path), str(tmp_path / "model"), input_spec=spec)
    assert "differs from the Paddle versions checked" in status["reason"]
    assert status["patched"] == []


ALL_OPS = """
    y = self.fc(x)
    a = F.sigmoid(y) * paddle.tanh(y)
    b = F.gelu(y) + F.softplus(y)
    c = paddle.matmul(a, b, transpose_y=True)
    d = paddle.abs(paddle.multiply(c, c))
    s = paddle.sum(paddle.maximum(d, c), axis=-1)
    return s + paddle.argmax(s, axis=-1, keepdim=True).astype("float32")
"""


@pytest.fixture(scope="module")
def all_ops_project(tmp_path_factory) -> Path:
    src = textwrap.dedent("""
        import paddle
        import paddle.nn as nn
        import paddle.nn.functional as F


        class Net(nn.Layer):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(16, 16)

            def forward(self, x):
        {body}

        def build():
            paddle.seed(0)
            return Net()
        """).format(body=textwrap.indent(textwrap.dedent(ALL_OPS).strip(), " " * 8))
    return tiny_project(tmp_path_factory.mktemp("all-ops") / "proj", "all-ops", src, [-1, 8, 16], samples=16)


@pytest.mark.parametrize("column", [
    pytest.param(dict(target="rpi4", precision="fp32"), id="lite-arm", marks=pytest.mark.needs_lite),
    pytest.param(dict(target="linux-x86", precision="fp32"), id="onnx"),
    pytest.param(dict(target="linux-x86", precision="fp32", route="legacy"), id="onnx-legacy"),
    pytest.param(dict(target="linux-x86", backend="lite", precision="fp32"), id="lite-x86",
                 marks=pytest.mark.needs_lite)])
def test_model_of_all_listed_ops_builds_for_every_backend(all_ops_project, column, tmp_path, monkeypatch):
    """ONNX builds take the PIR program (no patch needed: the PIR export is Paddle's own); the
    legacy program, forced here, goes to paddle2onnx 2.1 through its PIR translation."""
    from edgeforge import api
    from edgeforge.passes import export

    column = dict(column)
    route = column.pop("route", None)
    if route:
        monkeypatch.setattr(export, "routes_for", lambda project, backend, target=None: (route,))
    res = api.build(all_ops_project, out=tmp_path / "out", **column)
    m = res.manifest
    if m["export"]["route"] == "pir":
        assert column["target"] == "linux-x86" and "legacy_api_patch" not in m["export"], m["export"]
        assert "route_fallback" not in m["export"], m["export"]
        assert {"rewrite": "f64-attrs-f32", "ops": 1} in m["converter_fixes"], m["converter_fixes"]
    else:
        used = m["export"]["legacy_api_patch"]["used"]
        assert set(used) == {"sigmoid", "tanh", "gelu", "softplus", "matmul", "abs", "multiply", "sum",
                             "maximum", "argmax"}, used
    assert m["export"]["paddle"] == import_paddle().__version__
    if column["target"] == "rpi4":
        assert m["verify"]["status"] == "device-only" and m["artifact"]["size_bytes"] > 0
    else:
        assert m["verify"]["status"] == "passed", m["verify"]
        assert m["verify"]["rel_max_abs_error"] <= 1e-4
