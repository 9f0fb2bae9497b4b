"""The two program routes (docs/export.md "Program routes"): ONNX builds take the PIR program
first and fall back to the legacy one in one line when a pass fails on it; the route is in the
manifest and in the export step's cache key; paddle2onnx 2.1's input fixes apply on both routes."""
from __future__ import annotations

import json
import textwrap

import pytest
from helpers import run_cli, tiny_project

from edgeforge import api


def _project(tmp_path, body: str, shape: list[int]):
    src = textwrap.dedent("""
        import paddle
        import paddle.nn.functional as F
        from paddle import nn


        class Net(nn.Layer):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2D({c}, 4, 1)
                self.pool = nn.AdaptiveAvgPool2D(3)

            def forward(self, x):
        {body}


        def build():
            paddle.seed(0)
            return Net()
        """).format(c=shape[1], body=textwrap.indent(textwrap.dedent(body).strip(), " " * 8))
    return tiny_project(tmp_path / "p", "routes", src, shape, samples=8)


def test_an_upsampling_adaptive_pool_builds_on_the_pir_route(tmp_path):
    # adaptive pools that upsample by an integer factor (1x1 -> 3x3, vgg16 at 32x32; 2x2 -> 4x4,
    # PP-LiteSeg's context module at 64x64): paddle2onnx writes them from the PIR program with
    # strides [0, 0]; convert.onnx makes them a nearest Resize (legalize rewrites legacy programs only)
    body = "y = self.conv(x)\nreturn paddle.reshape(self.pool(y) + F.adaptive_max_pool2d(y, [3, 6])[:, :, :, :3], [-1, 36])"
    root = _project(tmp_path, body, [-1, 4, 1, 1])
    res = run_cli("build", str(root), "--target", "linux-x86", "--precision", "fp32", "--out", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["export"]["route"] == "pir" and "route_fallback" not in manifest["export"], manifest["export"]
    assert {"rewrite": "upsampling-pool-to-resize", "nodes": 2} in manifest["converter_fixes"]
    assert manifest["verify"]["status"] == "passed" and manifest["verify"]["rel_max_abs_error"] < 1e-5


@pytest.mark.needs_lite
def test_interpolate_converts_on_both_routes_with_the_scale_fix(tmp_path):
    """Paddle 3.3 writes F.interpolate's scale as f64, paddle2onnx 2.1 stops on it
    (passes/legalize/pir_json.py); the legacy program, translated to PIR, needs the same fix."""
    root = _project(tmp_path, "return F.interpolate(self.conv(x), scale_factor=2, mode='bilinear')", [-1, 2, 4, 4])
    pir = api.build(root, "linux-x86", out=tmp_path / "pir", precision="fp32")
    assert pir.manifest["export"]["route"] == "pir" and "route_fallback" not in pir.manifest["export"]
    assert {"rewrite": "interp-scale-f32", "ops": 1} in pir.manifest["converter_fixes"]
    assert pir.verify_status == "passed" and pir.manifest["verify"]["rel_max_abs_error"] < 1e-5
    lite = api.build(root, "linux-x86", out=tmp_path / "lite", backend="lite", precision="fp32")
    assert lite.manifest["export"]["route"] == "legacy" and lite.verify_status == "passed"
    key = {m["export"]["route"]: next(s["cache_key"] for s in m["steps"] if s["pass"] == "export")
           for m in (pir.manifest, lite.manifest)}
    assert key["pir"] != key["legacy"]          # the route is part of the export step's key


def test_the_legacy_route_through_paddle2onnx_2(tmp_path):
    """A legacy program (the Lite route's export) converts with paddle2onnx 2.1 as the PIR one."""
    import numpy as np

    from edgeforge.native import run_native
    from edgeforge.passes.export import export_model
    from edgeforge.passes.onnx import paddle2onnx_convert
    from edgeforge.runner.predictors import onnx_predictor, predict_all

    root = _project(tmp_path, "return F.interpolate(self.conv(x), scale_factor=2, mode='nearest')", [-1, 2, 4, 4])
    spec = [{"name": "x", "shape": [-1, 2, 4, 4], "dtype": "float32"}]
    x = {"x": np.random.default_rng(0).normal(size=(3, 2, 4, 4)).astype("float32")}
    outs = {}
    for route in ("legacy", "pir"):
        d = tmp_path / route
        d.mkdir()
        assert export_model(str(root), "model:build", None, spec, str(d), route)["ok"]["export"]["route"] == route
        fixes = run_native("test", "paddle2onnx", paddle2onnx_convert, (str(d), str(d / "m.onnx"), 13),
                           tmp_path / f"{route}.log")
        assert {"rewrite": "interp-scale-f32", "ops": 1} in fixes
        outs[route] = predict_all(onnx_predictor(d / "m.onnx"), x)[0]
    np.testing.assert_allclose(outs["legacy"], outs["pir"], rtol=1e-6, atol=1e-6)


def test_f64_attributes_reach_paddle2onnx_as_f32(tmp_path):
    """Paddle 3.3 writes leaky_relu's slope, softplus's beta/threshold and group_norm's epsilon
    as f64; paddle2onnx 2.1 reads float and keeps its defaults: softplus aborts the conversion,
    leaky_relu converts with slope 0.02 (passes/legalize/pir_json.py). With the fix, the ONNX
    model is Paddle's numbers."""
    body = """
        y = self.conv(x)
        return F.leaky_relu(y, 0.1) + F.softplus(y) + F.group_norm(y, 2, epsilon=1e-3)
    """
    root = _project(tmp_path, body, [-1, 3, 8, 8])
    res = api.build(root, "linux-x86", out=tmp_path / "o", precision="fp32")
    export = res.manifest["export"]
    assert export["route"] == "pir" and "route_fallback" not in export, export
    fixes = {f["rewrite"]: f for f in res.manifest["converter_fixes"]}
    assert fixes["f64-attrs-f32"]["ops"] >= 2, fixes
    assert res.verify_status == "passed" and res.manifest["verify"]["rel_max_abs_error"] < 1e-5, res.manifest["verify"]


def test_identity_nodes_are_dropped_for_symbolic_shapes(tmp_path):
    """paddle2onnx 2.1's Identity after a Constant hides a Reshape's shape from onnxruntime's
    symbolic shape inference (passes/onnx_graph.py); the converted model has none left."""
    import onnx

    root = _project(tmp_path, "return paddle.concat([self.conv(x), self.conv(x) * 0.5], axis=1)", [-1, 2, 4, 4])
    res = api.build(root, "linux-x86", out=tmp_path / "o", precision="fp32")
    assert any(f["rewrite"] == "drop-identity" for f in res.manifest["converter_fixes"]), res.manifest
    graph = onnx.load(str(res.out_dir / "model.onnx")).graph
    outputs = {o.name for o in graph.output}
    assert not [n for n in graph.node if n.op_type == "Identity" and n.output[0] not in outputs]
    assert res.verify_status == "passed"
