"""quant.arithmetic: the host judges an INT8 artifact with the target's arithmetic. A TensorRT
(or other-ISA) target gets the graph's exact QDQ arithmetic, never this host CPU's saturating
int16 u8 x s8 kernels (TOOLCHAIN 15); linux-x86 gets the host's kernels, saturation counted."""
from __future__ import annotations

import numpy as np
import pytest

from edgeforge.contracts import host_cpu_flags
from edgeforge.contracts import host_arithmetic
from edgeforge.quant.arithmetic import EXACT_QDQ, HOST_KERNELS, predictor
from edgeforge.targets import load_target


def test_the_rule_per_target_and_host():
    for name in ("jetson-orin", "jetson-nano"):
        for machine in ("x86_64", "aarch64"):
            a = host_arithmetic(load_target(name), "onnx", machine=machine)
            assert a["kind"] == EXACT_QDQ and "TensorrtExecutionProvider" in a["why"], a
    x86 = load_target("linux-x86")
    assert host_arithmetic(x86, "onnx", machine="x86_64")["kind"] == HOST_KERNELS
    assert host_arithmetic(x86, "onnx", machine="aarch64")["kind"] == EXACT_QDQ
    rpi4 = load_target("rpi4")
    assert host_arithmetic(rpi4, "onnx", machine="x86_64")["kind"] == EXACT_QDQ
    assert host_arithmetic(rpi4, "onnx", machine="aarch64")["kind"] == HOST_KERNELS
    assert host_arithmetic(load_target("jetson-orin"), "onnx", "fp16")["kind"] == HOST_KERNELS
    with pytest.raises(ValueError, match="unknown arithmetic"):
        predictor("unused.onnx", "fast")


K, N = 64, 16
SX, SW, SY = 2.0 ** -7, 2.0 ** -7, 2.0 ** -1   # powers of two: every exact path rounds alike


def saturating_gemm(path):
    """x -> Q/DQ (int8) -> Gemm with int8 weights of +-127 -> Q/DQ (int8): the TensorRT scheme.
    x86 without VNNI fuses it into an s8 x s8 QGemm whose VPMADDUBSW pair sums (255 * 127 * 2 =
    64770 after the s8 -> u8 shift) overflow int16."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).choice(np.array([-127, 127], np.int8), size=(K, N))
    c = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in
         (("sx", SX, np.float32), ("sw", SW, np.float32), ("sy", SY, np.float32), ("z", 0, np.int8))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "z"], ["wd"]),
             helper.make_node("Gemm", ["xd", "wd"], ["y"]),
             helper.make_node("QuantizeLinear", ["y", "sy", "z"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "z"], ["out"])]
    graph = helper.make_graph(nodes, "saturating_gemm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, K])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, N])],
                              c + [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return w


def test_exact_qdq_is_the_graphs_own_arithmetic_on_every_cpu(tmp_path):
    model = tmp_path / "gemm.onnx"
    w = saturating_gemm(model)
    rng = np.random.default_rng(1)
    xq = np.stack([np.sign(w[:, 0]) * 127, np.abs(w[:, 1]), rng.integers(-127, 128, K), rng.integers(0, 128, K),
                   rng.integers(-40, 41, K)]).astype(np.float64)
    x = (xq * SX).astype(np.float32)
    # the QDQ graph's arithmetic, by hand: int products summed exactly, requantized, dequantized
    acc = xq @ w.astype(np.float64)
    exact = np.clip(np.round(acc * SX * SW / SY), -128, 127) * SY
    got = predictor(model, EXACT_QDQ)({"x": x})[0]
    assert np.array_equal(got, exact), np.abs(got - exact).max() / SY
    kernels = predictor(model, HOST_KERNELS)({"x": x})[0]
    flags = host_cpu_flags()
    if "avx2" in flags and not flags & {"avx512_vnni", "avx_vnni"}:
        # the trap the rule exists for (measured on an AMD EPYC, AVX2 without VNNI: 57 of 64
        # values off, by up to 89 steps for this graph with random inputs)
        assert not np.array_equal(kernels, exact), "AVX2 without VNNI no longer saturates: re-measure TOOLCHAIN 15"


def test_exact_qdq_matches_onnx_reference_on_a_quantized_net(tmp_path):
    """The same on a graph onnxruntime's quantizer wrote (TensorRT scheme, per-channel Conv):
    the exact predictor equals onnx's pure-numpy reference evaluator."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    from edgeforge.quant.onnx_ptq import scheme_options

    rng = np.random.default_rng(2)
    conv_w = numpy_helper.from_array(rng.normal(size=(8, 3, 3, 3)).astype(np.float32), "cw")
    fc_w = numpy_helper.from_array(rng.normal(size=(8 * 6 * 6, 10)).astype(np.float32), "fw")
    shape = numpy_helper.from_array(np.array([-1, 8 * 6 * 6], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "cw"], ["c"], name="Conv.0"),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "fw"], ["y"], name="Gemm.0")]
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 10])], [conv_w, fc_w, shape])
    fp32, qdq = tmp_path / "net.onnx", tmp_path / "net.int8.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(fp32))
    x = rng.normal(size=(16, 3, 8, 8)).astype(np.float32)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter([{"x": x}])

        def get_next(self):
            return next(self._it, None)

    quantize_static(str(fp32), str(qdq), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    **scheme_options(load_target("jetson-orin").backend_config("onnx").scheme))
    ref_model = onnx.load(str(qdq))
    for op in ref_model.opset_import:       # onnx.reference implements DequantizeLinear from opset 19
        if op.domain in ("", "ai.onnx"):
            op.version = 21
    reference = ReferenceEvaluator(ref_model).run(None, {"x": x})[0]
    got = predictor(qdq, EXACT_QDQ)({"x": x})[0]
    # why (nearly) exact on every CPU: both evaluate the same graph in fp32, every product of
    # dequantized INT8 values; they differ only by fp32 summation order, at most K * 2^-24 of the
    # sum of |products| (K = 288 for the Gemm: ~2e-5 relative, ~1e-6 absolute on these logits).
    # A rounding flip in an intermediate QuantizeLinear would move a value by a whole step, far
    # over atol. Checked on this AVX-512 VNNI host and on an emulated AVX2-only CPU
    # (qemu-x86_64 -cpu Haswell, as test_arithmetic_avx2.py does): within atol on both.
    assert np.allclose(got, reference, rtol=0, atol=1e-5), np.abs(got - reference).max()


def test_the_kernel_probe_compares_the_hosts_kernels_with_the_graphs_arithmetic():
    """The probe runs its convs both ways on this host; whatever it finds, the rule follows it:
    linux-x86 is judged by the host's kernels only where they compute the QDQ graph."""
    from edgeforge.quant.arithmetic import PROBE_CONVS, kernel_probe

    probe = kernel_probe()
    assert probe["sound"] == (probe["wrong"] == [])
    assert {(cin, cout) for cin, cout, _ in probe["wrong"]} <= set(PROBE_CONVS)
    assert all(0 < share < 1 for _, _, share in probe["wrong"])
    rule = host_arithmetic(load_target("linux-x86"), "onnx")
    assert rule["kind"] == (HOST_KERNELS if probe["sound"] else EXACT_QDQ), rule
    if not probe["sound"]:
        assert "onnxruntime#26324" in rule["why"] and rule["host_kernels"] == "unsound"


def test_unsound_host_kernels_hand_the_judgement_to_the_exact_arithmetic(monkeypatch):
    import edgeforge.quant.arithmetic as arithmetic

    x86 = load_target("linux-x86")
    for sound, kind in ((True, HOST_KERNELS), (False, EXACT_QDQ)):
        probe = {"sound": sound, "wrong": [] if sound else [(3, 24, 0.01)], "onnxruntime": "1.23.2"}
        monkeypatch.setattr(arithmetic, "kernel_probe", lambda p=probe: p)
        assert host_arithmetic(x86, "onnx")["kind"] == kind
        # a named machine is a question about the rule, not about this host's kernels
        assert host_arithmetic(x86, "onnx", machine="x86_64")["kind"] == HOST_KERNELS
        # fp16 and other targets are unaffected
        assert host_arithmetic(x86, "onnx", "fp16")["kind"] == HOST_KERNELS
        assert host_arithmetic(load_target("jetson-orin"), "onnx")["kind"] == EXACT_QDQ
