"""edgeforge.contracts: QDQ models against an execution provider's rules, the target's scheme.
Real onnxruntime quantizer on small real ONNX models; no paddle."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from edgeforge.config import parse_model
from edgeforge.contracts import check_qdq, host_cpu_flags, int8_flags, onnx_scheme, summary
from edgeforge.errors import ConfigError
from edgeforge.quant.arithmetic import EXACT_QDQ, predictor
from edgeforge.quant.onnx_ptq import float_inputs, scheme_options
from edgeforge.targets import OnnxBackend, load_target

TRT = load_target("jetson-orin").backend.onnx.first_provider()[1]
X = np.random.default_rng(3).standard_normal((16, 4, 8, 8)).astype("float32")


def _conv_model(path):
    """x -> Conv(c1, bias) -> Relu -> Conv(c2) -> y."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype("float32") / 4, "W1"),
             numpy_helper.from_array(rng.standard_normal(8).astype("float32"), "B1"),
             numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype("float32") / 4, "W2")]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W1", "B1"], ["h"], name="c1", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("Conv", ["r", "W2"], ["y"], name="c2", pads=[1, 1, 1, 1])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8, 8, 8])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


class Reader(CalibrationDataReader):
    def __init__(self):
        self._it = iter([{"x": X[:8]}, {"x": X[8:]}])

    def get_next(self):
        return next(self._it, None)


def _quantize(tmp_path, name, exclude=None, **kw):
    src = _conv_model(tmp_path / "f.onnx")
    dst = tmp_path / name
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    nodes_to_exclude=exclude, **kw)
    return src, dst


def test_the_tensorrt_scheme_writes_what_tensorrt_accepts(tmp_path):
    scheme, flag, _ = onnx_scheme(load_target("jetson-orin"))
    assert flag is None and scheme.activations == "int8" and scheme.symmetric_activations
    _, q = _quantize(tmp_path, "trt.onnx", **scheme_options(scheme))
    assert check_qdq(q, TRT) == []
    s = summary(q)
    assert s["zero_point_types"] == {"int8": s["quantize_linear"] + s["dequantize_linear"]}
    assert s["zero_points_nonzero"] == 0 and s["quantize_linear"] >= 2
    assert ort.InferenceSession(str(q)).run(None, {"x": X})[0].shape == (16, 8, 8, 8)


def test_onnxruntime_defaults_break_tensorrt_rules_naming_the_nodes(tmp_path):
    _, q = _quantize(tmp_path, "u8.onnx", activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    found = check_qdq(q, TRT)
    rules = {v.rule for v in found}
    assert {"activation_types", "int32_dequantize"} <= rules
    [x_q] = [v for v in found if v.rule == "activation_types" and v.op_type == "QuantizeLinear"
             and v.node.startswith("x_")]
    assert "uint8" in x_q.message
    assert any(v.node.startswith("B1") for v in found if v.rule == "int32_dequantize")
    # the CPU provider takes the same model
    assert check_qdq(q, load_target("jetson-orin").backend.onnx.rules["CPUExecutionProvider"]) == []


def test_a_nonzero_zero_point_and_a_full_range_weight_are_named(tmp_path):
    w = numpy_helper.from_array(np.array([[-128, 5], [3, 127]], dtype=np.int8).reshape(2, 2, 1, 1), "Wq")
    inits = [w, numpy_helper.from_array(np.array([0.1, 0.1], np.float32), "ws"),
             numpy_helper.from_array(np.zeros(2, np.int8), "wz"),
             numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
             numpy_helper.from_array(np.array(7, np.int8), "xz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="xq"),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="xd"),
             helper.make_node("DequantizeLinear", ["Wq", "ws", "wz"], ["wd"], name="wd", axis=1),
             helper.make_node("Conv", ["xd", "wd"], ["y"], name="conv")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    found = {(v.node, v.rule) for v in check_qdq(path, TRT)}
    assert found == {("xq", "zero_point_zero"), ("xd", "zero_point_zero"), ("wd", "weight_range"),
                     ("wd", "conv_weight_axis")}


def test_float_inputs_still_rewires_a_kept_layer_under_the_int8_scheme(tmp_path):
    scheme, _, _ = onnx_scheme(load_target("jetson-orin"))
    src, q = _quantize(tmp_path, "keep.onnx", exclude=["c2"], **scheme_options(scheme))
    assert float_inputs(src, q, ["c2"]) == 1
    m = onnx.load(str(q))
    by_out = {o: n for n in m.graph.node for o in n.output}
    [c2] = [n for n in m.graph.node if n.name == "c2"]
    assert by_out[c2.input[0]].op_type == "Relu"          # symmetric int8 keeps the Relu: float path
    onnx.checker.check_model(m)
    assert check_qdq(q, TRT) == []
    ref = ort.InferenceSession(str(src)).run(None, {"x": X})[0]
    # judged in the arithmetic its target runs (TensorRT: exact int32 accumulation), never this
    # host CPU's u8 x s8 kernels, whose int16 pair sums saturate without VNNI (TOOLCHAIN 15, 31)
    out = predictor(q, EXACT_QDQ)({"x": X})[0]
    cos = np.sum(ref * out) / (np.linalg.norm(ref) * np.linalg.norm(out))
    # the bound from the arithmetic: each symmetric INT8 rounding adds uniform noise of rms
    # step/sqrt(12), step = max|t|/127, i.e. at most crest/440 of the tensor's rms (crest
    # max/rms <= 5 for these Gaussian-like tensors: 1.1 %); three roundings on the path (x, c1's
    # output, the weights) give ||e||/||y|| <= 3.5 % and cosine >= 1 - 0.035^2/2 = 0.9994.
    # 0.99 leaves room for correlated errors; a wrong scale or a lost QDQ pair is far below it.
    assert cos > 0.99


def test_linux_x86_picks_its_scheme_by_the_hosts_cpu_flags():
    x86 = load_target("linux-x86")
    vnni, flag, _ = onnx_scheme(x86, flags=frozenset({"avx2", "avx512_vnni"}))
    assert flag == "avx512_vnni" and not vnni.reduce_range
    plain, flag, flags = onnx_scheme(x86, flags=frozenset({"avx2", "fma"}))
    assert flag is None and plain.reduce_range and flags == ["avx2", "fma"]
    # a target that is not the build host ignores the host
    assert onnx_scheme(load_target("rpi4"))[1:] == (None, [])


def test_cpu_flags_are_read_for_x86_and_arm():
    x86 = "processor\t: 0\nflags\t\t: fpu avx2 fma avx512_vnni sse\n"
    arm = "processor\t: 0\nFeatures\t: fp asimd asimddp i8mm\n"
    assert int8_flags(host_cpu_flags(x86)) == ["avx2", "fma", "avx512_vnni"]
    assert int8_flags(host_cpu_flags(arm)) == ["asimd", "asimddp", "i8mm"]
    assert host_cpu_flags("") == frozenset()


def test_a_profile_must_state_its_first_providers_rules():
    with pytest.raises(ConfigError, match="rules.TensorrtExecutionProvider"):
        parse_model(OnnxBackend, {"execution_providers": ["TensorrtExecutionProvider", "CPUExecutionProvider"],
                                  "rules": {"CPUExecutionProvider": {}}}, "targets/x.toml")


def test_tensorrt_options_follow_the_precision():
    orin, nano = load_target("jetson-orin"), load_target("jetson-nano")
    assert orin.backend.onnx.provider_options("int8") == {
        "TensorrtExecutionProvider": {"trt_int8_enable": True, "trt_fp16_enable": True}}
    assert nano.backend.onnx.provider_options("fp16") == {
        "TensorrtExecutionProvider": {"trt_int8_enable": False, "trt_fp16_enable": True}}
    assert load_target("linux-x86").backend.onnx.provider_options("int8") == {}
