"""Builds that obey their target's runtime: the jetson-orin INT8 ONNX of the digits example is
what TensorRT accepts (signed INT8, zero point 0, no int32 DequantizeLinear); a uint8 artifact
for the same target fails verify with exit 3, naming the node. Real toolchain."""
from __future__ import annotations

import shutil

import pytest

from edgeforge import api
from edgeforge.contracts import check_qdq, summary
from edgeforge.errors import ExitCode, PassError
from edgeforge.targets import load_target, targets_dir


def test_the_jetson_orin_int8_artifact_passes_the_tensorrt_rules(digits_project, tmp_path):
    r = api.build(digits_project, "jetson-orin", out=tmp_path / "orin")
    m = r.manifest
    c = m["verify"]["contract"]
    assert (c["provider"], c["status"], c["violations"]) == ("TensorrtExecutionProvider", "passed", 0)
    assert c["zero_points_nonzero"] == 0 and set(c["zero_point_types"]) == {"int8"}
    assert c["quantize_linear"] >= 8
    assert m["quantization"]["scheme"]["activations"] == "int8"
    assert m["runtime"]["provider_options"] == {
        "TensorrtExecutionProvider": {"trt_int8_enable": True, "trt_fp16_enable": True}}
    rules = load_target("jetson-orin").backend.onnx.rules["TensorrtExecutionProvider"]
    assert check_qdq(r.out_dir / "model.onnx", rules) == []
    assert summary(r.out_dir / "model.onnx")["zero_point_max_abs"] == 0
    assert m["verify"]["status"] == "passed" and m["verify"]["accuracy_drop"] <= 1.0


def test_a_uint8_artifact_for_tensorrt_fails_verify_naming_the_node(digits_project, tmp_path, monkeypatch):
    tdir = tmp_path / "targets"
    shutil.copytree(targets_dir(), tdir)
    orin = tdir / "jetson-orin.toml"
    text = orin.read_text()
    for old, new in (('activations = "int8"', 'activations = "uint8"'),
                     ("symmetric_activations = true", "symmetric_activations = false"),
                     ("quantize_bias = false", "quantize_bias = true")):
        assert old in text
        text = text.replace(old, new, 1)
    orin.write_text(text)
    monkeypatch.setenv("EDGEFORGE_TARGETS", str(tdir))
    out = tmp_path / "orin-u8"
    with pytest.raises(PassError) as info:
        api.build(digits_project, "jetson-orin", out=out)
    err = info.value
    assert err.pass_name == "verify" and err.exit_code == ExitCode.PASS
    assert "node " in err.message and "TensorrtExecutionProvider" in err.message
    assert "QuantizeLinear" in err.message or "DequantizeLinear" in err.message
    assert not out.exists()                      # a failed build writes nothing
