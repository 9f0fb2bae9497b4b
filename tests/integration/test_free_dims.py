"""issue 25, free dimensions: a tiny conv net of free width ``[-1, 1, 16, -1]`` (min 16, opt 32,
max 64; the data 48 wide) built for onnxruntime fp32 and INT8, Paddle Lite x86 fp32, TensorRT
(jetson-orin) and Paddle Lite ARM (rpi4): verify runs the artifact at all three widths against
Paddle Inference at the same width, the ONNX model keeps the width symbolic, the manifest
carries the ranges and, for TensorRT, its optimisation profile."""
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
        self.c1 = nn.Conv2D(1, 8, 3, padding=1)
        self.c2 = nn.Conv2D(8, 4, 3, stride=2, padding=1)

    def forward(self, x):
        return self.c2(F.relu(self.c1(x)))


def build():
    paddle.seed(0)
    return Net()
"""
RANGES = {"min_shape": [1, 1, 16, 16], "opt_shape": [1, 1, 16, 32], "max_shape": [8, 1, 16, 64]}
WIDTHS = [16, 32, 64]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return tiny_project(tmp_path_factory.mktemp("free") / "proj", "free-width", MODEL, [-1, 1, 16, -1],
                        samples=16, ranges=RANGES, data_shape=[1, 16, 48])


def _shapes(manifest: dict) -> list[dict]:
    v = manifest["verify"]
    assert v["status"] == "passed", v.get("reason")
    shapes = v["shapes"]
    assert [r["level"] for r in shapes] == ["min", "opt", "max"]
    assert [r["sizes"]["x"] for r in shapes] == [[4, 1, 16, w] for w in WIDTHS]
    assert all(r["status"] == "passed" for r in shapes), shapes
    return shapes


def _ranges_recorded(manifest: dict) -> None:
    assert manifest["inputs"] == [{"name": "x", "shape": [-1, 1, 16, -1], "dtype": "float32", **RANGES}]


def test_onnx_fp32_at_min_opt_max(project, tmp_path):
    import onnx

    m = api.build(project, "linux-x86", precision="fp32", out=tmp_path / "out").manifest
    for r in _shapes(m):
        assert r["judged_by"] == "rel_max_abs_error" and r["rel_max_abs_error"] <= 1e-4, r
    _ranges_recorded(m)
    assert "trt_profile" not in m                          # CPUExecutionProvider first: no profile
    dims = onnx.load(str(tmp_path / "out" / "model.onnx")).graph.input[0].type.tensor_type.shape.dim
    assert [bool(d.dim_param) for d in dims] == [True, False, False, True]    # batch and width free
    assert [d.dim_value for d in dims][1:3] == [1, 16]


@pytest.mark.needs_lite
def test_lite_x86_fp32_at_min_opt_max(project, tmp_path):
    m = api.build(project, "linux-x86", backend="lite", precision="fp32", out=tmp_path / "out").manifest
    assert m["verify"]["runtime"]["name"] == "paddlelite"
    for r in _shapes(m):
        assert r["rel_max_abs_error"] <= 1e-4, r
    _ranges_recorded(m)


def test_onnx_int8_cosine_at_min_opt_max(project, tmp_path):
    m = api.build(project, "linux-x86", precision="int8", out=tmp_path / "out").manifest
    assert m["precision"] == "int8"
    for r in _shapes(m):
        assert r["judged_by"] == "cosine" and r["cosine"] >= 0.99, r


def test_tensorrt_gets_the_profile(project, tmp_path):
    m = api.build(project, "jetson-orin", precision="fp32", out=tmp_path / "out").manifest
    _shapes(m)
    prof = m["trt_profile"]
    assert prof == {"trt_profile_min_shapes": "x:1x1x16x16", "trt_profile_opt_shapes": "x:1x1x16x32",
                    "trt_profile_max_shapes": "x:8x1x16x64", "complete": True}
    trt = m["runtime"]["provider_options"]["TensorrtExecutionProvider"]
    assert {k: trt[k] for k in prof if k != "complete"} == {k: v for k, v in prof.items() if k != "complete"}


@pytest.mark.needs_lite
def test_device_only_target_records_what_was_skipped(project, tmp_path):
    m = api.build(project, "rpi4", precision="fp32", out=tmp_path / "out").manifest
    assert m["verify"]["status"] == "device-only"
    shapes = m["verify"]["shapes"]
    assert [r["status"] for r in shapes] == ["skipped"] * 3
    assert "rpi4" in shapes[0]["reason"] and [r["sizes"]["x"][3] for r in shapes] == WIDTHS


EXPORT = """
import sys
sys.path.insert(0, sys.argv[1])
import paddle
from model import build
layer = build()
layer.eval()
paddle.jit.save(layer, sys.argv[2], input_spec=[paddle.static.InputSpec([None, 1, 16, None], "float32", "x")])
"""


def test_inference_program_with_a_free_width(project, tmp_path):
    """An exported program whose width is -1: refused without ranges (exit 2, and init says so),
    built with them declared in [[model.inputs]]."""
    import os
    import shutil
    import subprocess
    import sys

    from edgeforge.errors import ConfigError
    from edgeforge.init import ModelSource, init_project
    from edgeforge.project import load_project

    prefix = tmp_path / "export" / "inference"
    subprocess.run([sys.executable, "-c", EXPORT, str(project), str(prefix)], check=True, timeout=300,
                   env=dict(os.environ, FLAGS_enable_pir_api="0"), capture_output=True, text=True)
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copytree(project / "data", proj / "data")
    toml = f'name = "free-program"\n[model]\ninference = "{prefix}"\n[data]\ncalibration = "data/calib.npz"\n' \
           'evaluation = "data/eval.npz"\n'
    (proj / "edgeforge.toml").write_text(toml)
    with pytest.raises(ConfigError, match=r"input 'x' has a free dimension \(-1\) beyond the batch, at dim 3") as exc:
        _ = load_project(proj).inputs
    assert exc.value.exit_code == 2
    res = init_project(tmp_path / "init", ModelSource(from_inference=str(prefix)))
    assert any("min_shape" in m and "x" in m for m in res.missing), res.missing
    assert "shape = [-1, 1, 16, -1]" in (tmp_path / "init" / "edgeforge.toml").read_text()

    ranges = "".join(f"{k} = {v}\n" for k, v in RANGES.items())
    (proj / "edgeforge.toml").write_text(toml.replace("[data]", '[[model.inputs]]\nname = "x"\nshape = [-1, 1, 16, -1]\n'
                                                      f'dtype = "float32"\n{ranges}[data]'))
    m = api.build(proj, "linux-x86", precision="fp32", out=tmp_path / "out").manifest
    for r in _shapes(m):
        assert r["rel_max_abs_error"] <= 1e-4, r
    _ranges_recorded(m)
