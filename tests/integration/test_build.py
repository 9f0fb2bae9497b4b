"""edgeforge build end to end on the trained digits example, with the real toolchain."""
from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from edgeforge import api
from edgeforge.paddle_env import paddle_inference


class _Builds(dict):
    """digits for rpi4 (Lite INT8), jetson-orin, linux-x86 ONNX fp32 and Lite fp32, each built the
    first time a test asks for it (a machine without the Lite toolchain skips only the Lite ones)."""
    ARGS = {"rpi4": ("rpi4", {}), "orin": ("jetson-orin", {}),
            "x86-onnx-fp32": ("linux-x86", {"precision": "fp32"}),
            "x86-lite": ("linux-x86", {"backend": "lite"})}

    def __init__(self, project, out):
        super().__init__()
        self.project, self.out = project, out

    def __missing__(self, key):
        target, extra = self.ARGS[key]
        self[key] = api.build(self.project, target, out=self.out / key, **extra)
        return self[key]


@pytest.fixture(scope="module")
def builds(digits_project, tmp_path_factory):
    return _Builds(digits_project, tmp_path_factory.mktemp("builds"))


@pytest.mark.needs_lite
def test_rpi4_gives_int8_nb_for_arm(builds):
    r = builds["rpi4"]
    m = r.manifest
    assert m["schema"] == "edgeforge.build/1"
    assert (m["backend"], m["precision"], m["target"]) == ("lite", "int8", "rpi4")
    assert m["runtime"]["valid_targets"] == ["arm"]
    nb = r.out_dir / m["artifact"]["path"]
    assert nb.suffix == ".nb" and nb.stat().st_size == m["artifact"]["size_bytes"]
    assert m["verify"]["status"] == "device-only"
    # INT8 weights: the .nb is well under the float .nb
    assert m["float_size_bytes"] / m["artifact"]["size_bytes"] > 2.0
    assert [s["pass"] for s in m["steps"]] == ["export", "legalize", "quantize.ptq", "legalize.int8",
                                                 "convert.lite", "verify"]
    # the reference data the device runner needs ships with the artifact
    with np.load(r.out_dir / "reference/eval_inputs.npz") as z:
        assert set(z.files) == {"x", "labels"}
    with np.load(r.out_dir / "reference/float_outputs.npz") as z:
        assert z["output_0"].shape == (540, 10)
    assert json.loads((r.out_dir / "manifest.json").read_text()) == m


@pytest.mark.needs_lite
def test_manifest_says_whether_fast_kl_calibration_took(builds):
    """The Lite path calibrates with Paddle's KL PTQ through edgeforge's fast paths; the manifest
    says whether they took (they switch themselves off when Paddle's source differs)."""
    q = builds["rpi4"].manifest["quantization"]
    assert q["algo"] == "KL"
    assert q["fast_kl"]["enabled"] is True, q["fast_kl"]
    assert "fast_kl" not in (builds["orin"].manifest["quantization"] or {})    # ONNX path: no Paddle PTQ


def test_jetson_orin_onnx_int8_runs_in_onnxruntime_within_one_point(builds, digits_project):
    r = builds["orin"]
    m = r.manifest
    assert (m["backend"], m["precision"]) == ("onnx", "int8")
    assert any(n.op_type in ("QuantizeLinear", "QLinearConv") for n in __import__("onnx").load(str(r.out_dir / "model.onnx")).graph.node)
    with np.load(digits_project / "data/eval.npz") as z:
        x, labels = z["x"], z["labels"]
    v = m["verify"]
    # TensorRT accumulates INT8 products exactly: the host judges the artifact in exact QDQ
    # arithmetic (graph optimizations off), not its own CPU's saturating kernels (quant.arithmetic)
    assert v["arithmetic"]["kind"] == "exact-qdq"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(r.out_dir / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    acc = float((sess.run(None, {"x": x})[0].argmax(1) == labels).mean())
    assert v["status"] == "passed"
    assert v["accuracy"] == pytest.approx(acc)
    assert v["float_accuracy"] >= 0.97
    assert v["float_accuracy"] - acc <= 0.010 + 1e-9          # at most 1.0 point lost
    assert m["artifact"]["size_bytes"] < m["float_size_bytes"] / 2


@pytest.mark.parametrize("key", ["x86-onnx-fp32", pytest.param("x86-lite", marks=pytest.mark.needs_lite)])
def test_float_artifacts_match_paddle_inference(builds, key, digits_project):
    r = builds[key]
    v = r.manifest["verify"]
    assert v["status"] == "passed"
    assert v["max_abs_error"] <= 1e-4
    assert v["top1_agreement"] == 1.0
    # independent check of the ONNX one against Paddle Inference
    if r.manifest["backend"] == "onnx":
        with np.load(digits_project / "data/eval.npz") as z:
            x = z["x"][:64]
        sess = ort.InferenceSession(str(r.out_dir / "model.onnx"), providers=["CPUExecutionProvider"])
        with np.load(r.out_dir / "reference/float_outputs.npz") as z:
            ref = z["output_0"][:64]
        assert np.abs(sess.run(None, {"x": x})[0] - ref).max() <= 1e-4


def test_x86_lite_int8_is_refused(digits_project, tmp_path):
    from edgeforge.errors import ConfigError

    with pytest.raises(ConfigError, match="x86 INT8"):
        api.build(digits_project, "linux-x86", backend="lite", precision="int8", out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_reference_outputs_are_paddle_inference(builds, digits_project, tmp_path):
    """The float reference shipped with a build is what Paddle Inference computes on an
    independent export of the trained model."""
    import paddle

    from edgeforge.passes.export import import_factory

    layer = import_factory(digits_project, "model:DigitsNet")()
    layer.set_state_dict(paddle.load(str(digits_project / "digits.pdparams")))
    layer.eval()
    paddle.jit.save(layer, str(tmp_path / "model"),
                    input_spec=[paddle.static.InputSpec([None, 1, 32, 32], "float32", "x")])
    r = builds["x86-onnx-fp32"]
    with np.load(r.out_dir / "reference/eval_inputs.npz") as z:
        x = z["x"]
    with np.load(r.out_dir / "reference/float_outputs.npz") as z:
        ref = z["output_0"]
    ours = paddle_inference(tmp_path, {"x": x})[0]
    assert np.abs(ours - ref).max() <= 1e-5


def test_jetson_nano_gets_fp16_onnx(digits_project, tmp_path):
    """A board without fast INT8 gets fp16 by default (targets/jetson-nano.toml)."""
    import onnx

    r = api.build(digits_project, "jetson-nano", out=tmp_path / "nano")
    m = r.manifest
    assert (m["backend"], m["precision"]) == ("onnx", "fp16")
    model = onnx.load(str(r.out_dir / "model.onnx"))
    weights = list(model.graph.initializer) + [a.t for n in model.graph.node if n.op_type == "Constant"
                                               for a in n.attribute if a.name == "value"]
    assert any(t.data_type == onnx.TensorProto.FLOAT16 for t in weights)
    assert m["verify"]["status"] == "passed" and m["verify"]["top1_agreement"] >= 0.99
    assert m["artifact"]["size_bytes"] < 0.6 * m["float_size_bytes"]
