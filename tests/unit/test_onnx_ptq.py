"""edgeforge.quant.onnx_ptq: KL / mse thresholds for onnxruntime's static quantizer, and the
calibration reuse of the accuracy-budget rounds. Real onnxruntime, a small real ONNX model."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                      quantize_static)

from edgeforge.quant.kl import cal_kl_threshold_fast
from edgeforge.quant.onnx_ptq import kl_range, mse_threshold, paddle_kl_entropy, reuse_calibration


def _model(path):
    """x[?, 64] -> MatMul(W) -> h -> Relu -> r -> MatMul(V) -> y (the graph output)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype("float32") / 8, "W")
    v = numpy_helper.from_array(rng.standard_normal((64, 10)).astype("float32") / 8, "V")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm1"),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("MatMul", ["r", "V"], ["y"], name="mm2")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 10])], initializer=[w, v])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


class Reader(CalibrationDataReader):
    def __init__(self, batches):
        self._it = iter(batches)
        self.calls = 0

    def get_next(self):
        self.calls += 1
        return next(self._it, None)


def _batches():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((256, 64)).astype("float32")
    x[0, :4] = 40.0                         # a few outliers: KL should clip them
    return [{"x": x[:128]}, {"x": x[128:]}]


def _scales(path) -> dict[str, float]:
    m = onnx.load(str(path))
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    return {n.input[0]: float(init[n.input[1]]) for n in m.graph.node
            if n.op_type == "QuantizeLinear" and init[n.input[1]].size == 1}


def _quantize(src, dst, method, reader=None):
    quantize_static(str(src), str(dst), Reader(_batches()) if reader is None else reader, quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=method)
    return _scales(dst)


def _signed_hist(x, t):
    return np.histogram(x, 4096, range=(-t, t))


def _folded(hist):
    h = np.asarray(hist, np.int64)
    f = h[2048:].copy()
    f[:2048] += h[:2048][::-1]
    return f


def test_kl_range_clips_a_tail_that_costs_less_than_the_resolution_it_buys():
    x = np.random.default_rng(0).standard_normal(1_000_000).astype("float32")
    x[:5] = 12.0                       # 5 in a million: clipping them costs less than the bulk's rounding
    hist, edges = _signed_hist(x, 12.0)
    lo, hi = kl_range(hist, edges, float(x.min()), float(x.max()))
    assert 3.0 < hi < 0.5 * 12.0 and -hi <= lo < -3.0


def test_kl_range_is_never_below_the_least_squares_threshold():
    x = np.random.default_rng(0).standard_normal(1_000_000).astype("float32")
    x[:20] = 30.0                      # far enough that clipping them costs more than it buys
    hist, edges = _signed_hist(x, 30.0)
    kl_alone = float(cal_kl_threshold_fast(_folded(hist), 30.0 / 2048, 8))
    least_squares = mse_threshold(_folded(hist), 30.0 / 2048, 8)
    lo, hi = kl_range(hist, edges, float(x.min()), float(x.max()))
    assert kl_alone < 0.5 * 30.0 < least_squares              # Paddle's KL alone clips them
    assert hi == pytest.approx(least_squares) and hi > 0.7 * 30.0


def test_the_zero_spike_of_a_relu_does_not_pull_the_threshold_down():
    # a ReLU6 output: half of it exactly 0; every scale represents 0 exactly
    y = np.clip(np.random.default_rng(0).standard_normal(1_000_000).astype("float32") * 1.5, 0, 6)
    hist, edges = _signed_hist(y, 6.0)
    with_spike = float(cal_kl_threshold_fast(_folded(hist), 6.0 / 2048, 9))
    lo, hi = kl_range(hist, edges, 0.0, float(y.max()), bits=9)
    assert with_spike < 0.65 * 6.0                            # Paddle's search on the raw histogram
    assert lo == 0.0 and 0.95 * 6.0 < hi <= 6.0


@pytest.mark.parametrize("criterion", ["kl", "mse"])
def test_inner_ranges_are_clipped_and_the_model_output_is_not(tmp_path, criterion):
    from edgeforge.quant.onnx_ptq import _kl_calibrater_class

    src = _model(tmp_path / "m.onnx")
    minmax = _quantize(src, tmp_path / "minmax.onnx", CalibrationMethod.MinMax)
    with paddle_kl_entropy(criterion):
        ours = _quantize(src, tmp_path / f"{criterion}.onnx", CalibrationMethod.Entropy)
    # the input carries outliers: its range (and so its scale) shrinks under KL/mse (no further
    # than least squares: the 4 at 40 cost more clipped than the resolution they take)
    assert ours["x"] < 0.99 * minmax["x"], (ours["x"], minmax["x"])
    # the calibrator never clips the model's own output: the user reads it
    cal = _kl_calibrater_class(criterion)(str(src), augmented_model_path=str(tmp_path / "aug.onnx"))
    cal.augment_graph()
    cal.create_inference_session()
    cal.collect_data(Reader(_batches()))
    ranges = cal.compute_data()
    x = np.concatenate([b["x"] for b in _batches()])
    v = numpy_helper.to_array(onnx.load(str(src)).graph.initializer[1])
    y = np.maximum(x @ numpy_helper.to_array(onnx.load(str(src)).graph.initializer[0]), 0) @ v
    lo, hi = (float(np.asarray(r).ravel()[0]) for r in ranges["y"].range_value)
    assert (lo, hi) == pytest.approx((float(y.min()), float(y.max())), rel=1e-5)
    assert float(np.asarray(ranges["x"].range_value[1]).ravel()[0]) < 0.99 * float(x.max())


def test_reuse_calibration_calibrates_once_per_key(tmp_path):
    src = _model(tmp_path / "m.onnx")
    cache: dict = {}
    first = Reader(_batches())
    with paddle_kl_entropy("kl"), reuse_calibration(cache, "KL"):
        a = _quantize(src, tmp_path / "a.onnx", CalibrationMethod.Entropy, first)
    assert "KL" in cache and first.calls > 1
    again = Reader(_batches())
    with paddle_kl_entropy("kl"), reuse_calibration(cache, "KL"):
        b = _quantize(src, tmp_path / "b.onnx", CalibrationMethod.Entropy, again)
    assert again.calls == 0, "the cached ranges were not reused"
    assert a == b
    other = Reader(_batches())
    with reuse_calibration(cache, "avg"):
        c = _quantize(src, tmp_path / "c.onnx", CalibrationMethod.MinMax, other)
    assert other.calls > 1 and c["x"] > a["x"]


def test_convert_onnx_refuses_a_zero_stride_pool_naming_the_node(tmp_path):
    """paddle2onnx 1.3.1 writes stride-0 pools for adaptive pools that upsample (vgg16 below
    224x224); onnxruntime would die of SIGFPE on them. convert.onnx refuses them instead."""
    from edgeforge.errors import PassError
    from edgeforge.passes.onnx import check_converted

    def model(strides, path):
        node = helper.make_node("AveragePool", ["x"], ["y"], name="pool0", kernel_shape=[1, 1], strides=strides)
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 1, 1])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
        return path

    check_converted("convert.onnx", model([1, 1], tmp_path / "ok.onnx"))
    with pytest.raises(PassError) as info:
        check_converted("convert.onnx", model([0, 0], tmp_path / "bad.onnx"))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("pass convert.onnx: ") and "'pool0'" in msg and "strides [0, 0]" in msg
    assert "--backend lite" in msg


def _conv_model(path):
    """x[?, 4, 8, 8] -> c1 -> Relu -> c2 -> Relu -> c3 -> y: quantized Convs quantize their outputs
    and onnxruntime folds each Relu into that range."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype("float32") / 4, name)
             for name, shape in (("W1", (8, 4, 3, 3)), ("W2", (8, 8, 3, 3)), ("W3", (4, 8, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "W1"], ["h1"], name="c1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "W2"], ["h2"], name="c2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "W3"], ["y"], name="c3", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_layer_kept_in_float_reads_a_float_input(tmp_path):
    """nodes_to_exclude alone keeps c2's weights float but its input stays quantized (c1 quantizes
    its output; the Relu between them is folded). float_inputs rewires c2 to the float activation,
    restoring the folded Relu, so c2 computes exactly in float on what c1 produced."""
    import onnxruntime as ort

    from edgeforge.quant.onnx_ptq import float_inputs

    src = _conv_model(tmp_path / "f.onnx")
    x = np.random.default_rng(3).standard_normal((16, 4, 8, 8)).astype("float32")
    dst = tmp_path / "q.onnx"
    quantize_static(str(src), str(dst), Reader([{"x": x[:8]}, {"x": x[8:]}]), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, nodes_to_exclude=["c2"])

    def c2_input(path):
        m = onnx.load(str(path))
        by_out = {o: n for n in m.graph.node for o in n.output}
        [c2] = [n for n in m.graph.node if n.name == "c2"]
        return m, by_out.get(c2.input[0])

    _, feeder = c2_input(dst)
    assert feeder.op_type == "DequantizeLinear"          # what nodes_to_exclude leaves
    assert float_inputs(src, dst, ["c2"]) == 1
    model, feeder = c2_input(dst)
    assert feeder.op_type == "Relu"                      # the folded Relu, restored on the float path
    onnx.checker.check_model(model)

    # c2's input must be relu(c1's output) exactly, and c2 must run on it in float
    ins = {n.name: n for n in model.graph.node}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in (ins["c2"].input[0], ins["c2"].output[0], feeder.input[0]):
        probe.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    names = [o.name for o in probe.graph.output]
    outs = dict(zip(names, ort.InferenceSession(probe.SerializeToString()).run(None, {"x": x})))
    c1_out, c2_in, c2_out = outs[feeder.input[0]], outs[ins["c2"].input[0]], outs[ins["c2"].output[0]]
    np.testing.assert_array_equal(c2_in, np.maximum(c1_out, 0))
    w2 = numpy_helper.to_array(next(i for i in onnx.load(str(src)).graph.initializer if i.name == "W2"))
    ref = ort.InferenceSession(onnx.load(str(src)).SerializeToString())
    single = helper.make_graph([helper.make_node("Conv", ["a", "W2"], ["b"], pads=[1, 1, 1, 1])], "c2",
                               [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)],
                               [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)],
                               initializer=[numpy_helper.from_array(w2, "W2")])
    conv = ort.InferenceSession(helper.make_model(single, opset_imports=[helper.make_opsetid("", 13)],
                                                  ir_version=8).SerializeToString())
    np.testing.assert_allclose(c2_out, conv.run(None, {"a": c2_in})[0], rtol=1e-5, atol=1e-5)
    assert len(np.unique(c2_in)) > 1000                   # not on an 8-bit grid
    y_float = ref.run(None, {"x": x})[0]
    assert np.isfinite(outs["y"]).all() and np.abs(outs["y"] - y_float).max() < np.abs(y_float).max()
