"""Histogram calibration on a degenerate range (issue 45): onnxruntime's own collectors stop on a
near-constant, subnormal or infinite tensor; under edgeforge's guard that tensor gets its finite
min/max range, the rest their histogram thresholds, and the record says which and why."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, quantize_static

from edgeforge.build_meta import BuildMeta, Quantization
from edgeforge.quant.degenerate import guard_histograms, note, note_fast_kl, why_degenerate
from edgeforge.quant.onnx_ptq import paddle_kl_entropy

ONE_BELOW = np.nextafter(np.float32(1), np.float32(0))     # 0.99999994


def _model(path):
    """x [N, 8] -> MatMul(W) -> y -> Relu -> out; W the identity, so y is x."""
    w = numpy_helper.from_array(np.eye(8, dtype=np.float32), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Relu", ["y"], ["out"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, 8])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


class _Reader(CalibrationDataReader):
    def __init__(self, batches):
        self.it = iter(batches)

    def get_next(self):
        return next(self.it, None)


def _quantize(src, dst, batches, method, guarded: dict | None):
    kl = paddle_kl_entropy("kl") if method == CalibrationMethod.Entropy else _null()
    with kl, (guard_histograms(guarded) if guarded is not None else _null()):
        quantize_static(str(src), str(dst), _Reader(batches), quant_format=QuantFormat.QDQ,
                        calibrate_method=method, extra_options={"symmetric": method == CalibrationMethod.Percentile})


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def _scales(path) -> dict:
    m = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    return {n.input[0]: float(inits[n.input[1]]) for n in m.graph.node if n.op_type == "QuantizeLinear"}


def _upstream_broken(method, x) -> bool:
    """onnxruntime's own collector on ``x``, as the calibrator sets it up: it raises (numpy >= 2.1:
    "Too many bins for data range"; any numpy: "range ... is not finite"), or (numpy 1.26) its
    bins have zero width."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    from edgeforge.quant.onnx_ptq import HIST_BINS

    entropy = method == CalibrationMethod.Entropy
    c = HistogramCollector(method="entropy" if entropy else "percentile", symmetric=not entropy,
                           num_bins=HIST_BINS if entropy else 2048, num_quantized_bins=128, percentile=99.999,
                           scenario="same")
    try:
        c.collect({"x": [np.asarray(x, np.float32)]})
    except ValueError:
        return True
    edges = c.histogram_dict["x"][1]
    return bool(np.any(edges[:-1] >= edges[1:]))


CASES = {   # a tensor that onnxruntime's histogram collector cannot bin, by method
    "near-constant, hist (Percentile, 2048 bins of |x|)":
        (CalibrationMethod.Percentile, np.where(np.arange(32).reshape(4, 8) % 2, 1.0, ONE_BELOW)),
    "subnormal, KL (Entropy, 4096 bins)": (CalibrationMethod.Entropy, np.full((4, 8), 1e-43)),
    "inf, KL": (CalibrationMethod.Entropy, np.r_[np.ones((3, 8)), np.full((1, 8), np.inf)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_degenerate_tensor_falls_back_to_its_min_max(case, tmp_path):
    method, x = CASES[case]
    x = np.asarray(x, np.float32)
    assert _upstream_broken(method, x)
    src = _model(tmp_path / "m.onnx")
    record: dict = {}
    _quantize(src, tmp_path / "q.onnx", [{"x": x}], method, record)
    assert set(record) >= {"x", "y"}, record                  # y is x (identity MatMul)
    finite = x[np.isfinite(x)]
    scale = _scales(tmp_path / "q.onnx")["x"]
    # uint8 activations over [min(lo, 0), max(hi, 0)] of the finite values; onnxruntime makes a
    # scale below float32's tiny 1.0
    want = float(finite.max()) / 255
    assert scale == pytest.approx(want if want >= np.finfo(np.float32).tiny else 1.0, rel=1e-6)
    meta = BuildMeta()
    lines: list = []
    note(meta, record, lines.append)
    assert meta.quantization.degenerate_ranges["tensors"] == dict(sorted(record.items()))
    assert len(lines) == 1 and "degenerate range" in lines[0]


def test_a_healthy_tensor_keeps_its_histogram(tmp_path):
    """A spread tensor is not touched: same scales with and without the guard."""
    src = _model(tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    batches = [{"x": rng.normal(size=(16, 8)).astype(np.float32)} for _ in range(2)]
    _quantize(src, tmp_path / "a.onnx", batches, CalibrationMethod.Entropy, None)
    batches = [{"x": b["x"].copy()} for b in batches]
    record: dict = {}
    _quantize(src, tmp_path / "b.onnx", batches, CalibrationMethod.Entropy, record)
    assert record == {} and _scales(tmp_path / "a.onnx") == _scales(tmp_path / "b.onnx")


def test_why_degenerate_names_the_cause():
    assert why_degenerate(np.float32([1, 2, 3]), 2048, absolute=True) is None
    assert "non-finite" in why_degenerate(np.float32([1, np.nan]), 2048, absolute=False)
    assert "cannot hold 2048" in why_degenerate(np.float32([ONE_BELOW, 1]), 2048, absolute=True)
    assert why_degenerate(np.float32([0, 0]), 2048, absolute=True) is None      # numpy widens a constant
    old = (None, np.linspace(0, 1e-6, 4097, dtype=np.float32))
    assert "grows" in why_degenerate(np.float32([1e3]), 4096, absolute=False, old=old)


def _overflowing_model(tmp_path):
    """x -> conv -> exp(60 h) (inf where h > ~1.5) -> conv -> fc: the second conv's input, a
    quantized activation, holds infs on ordinary inputs."""
    from edgeforge.paddle_env import private_scope, static_mode
    from edgeforge.passes.export_compat import legacy_apis     # paddle.exp: a PIR-only binding in 3.3

    with static_mode() as paddle, private_scope(paddle) as (_, exe):
        main, startup = paddle.static.Program(), paddle.static.Program()
        main.random_seed = startup.random_seed = 3
        with paddle.static.program_guard(main, startup), legacy_apis():
            x = paddle.static.data("x", [None, 3, 8, 8], "float32")
            h = paddle.exp(paddle.static.nn.conv2d(x, 4, 3, padding=1) * 60.0)
            y = paddle.static.nn.fc(paddle.flatten(paddle.static.nn.conv2d(h, 4, 3, padding=1), 1), 5)
        exe.run(startup)
        paddle.static.save_inference_model(str(tmp_path / "fp32" / "model"), [x], [y], exe, program=main)
    return tmp_path / "fp32"


def _paddle_kl_ptq(model_dir, out_dir, batches):
    import paddle
    from paddle.static.quantization import PostTrainingQuantization

    paddle.enable_static()
    scope, exe = paddle.static.Scope(), paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope), paddle.utils.unique_name.guard():
        ptq = PostTrainingQuantization(executor=exe, scope=scope, model_dir=str(model_dir),
                                       model_filename="model.pdmodel", params_filename="model.pdiparams",
                                       data_loader=lambda: ({"x": b} for b in batches), batch_nums=len(batches),
                                       algo="KL", onnx_format=False)
        ptq.quantize()
        ptq.save_quantized_model(str(out_dir), model_filename="model.pdmodel", params_filename="model.pdiparams")


def test_paddle_ptq_bins_an_activation_with_infs_over_its_finite_values(tmp_path):
    """Lite path: Paddle's own KL sampling stops on the activation's non-finite range; edgeforge's
    sampling takes the finite values' range, and the record names the activation."""
    from edgeforge.quant.kl import fast_kl

    model = _overflowing_model(tmp_path)
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal((4, 3, 8, 8)).astype(np.float32) for _ in range(2)]
    with fast_kl(sampling=False), pytest.raises(ValueError, match="is not finite"):      # Paddle's own
        _paddle_kl_ptq(model, tmp_path / "paddle", batches)
    with fast_kl() as status:
        _paddle_kl_ptq(model, tmp_path / "q", batches)
    fallen = dict(status["degenerate_ranges"])
    assert "exp_0.tmp_0" in fallen, fallen          # and what reads it, downstream
    assert all("non-finite value(s) (inf/nan)" in why for why in fallen.values()), fallen
    assert (tmp_path / "q" / "model.pdmodel").is_file()
    meta = BuildMeta(quantization=Quantization())
    lines: list = []
    note_fast_kl(meta, status, lines.append)
    assert meta.quantization.fast_kl == {"enabled": True, "reason": "fast threshold search and sampling"}
    assert meta.quantization.degenerate_ranges["tensors"] == fallen and len(lines) == 1, lines
