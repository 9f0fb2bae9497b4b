"""passes.fake_quant: the QAT fine-tune's fake quantization is onnxruntime's quantization, value
for value, in each of the targets' schemes; quant.qat_ranges finds each learned range's tensor."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeforge.passes.fake_quant import Grid, fake_quant, fake_quant_weight
from edgeforge.quant.qat_ranges import onnx_overrides

SCHEMES = {  # (activations, symmetric, reduce_range): linux-x86 with VNNI, AVX2, TensorRT
    "u8": ("uint8", False, False), "u8-reduce": ("uint8", False, True), "s8-symmetric": ("int8", True, False)}


def _paddle():
    from edgeforge.paddle_env import import_paddle

    paddle = import_paddle()
    paddle.disable_static()
    return paddle


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_activation_grid_is_onnxruntimes(scheme):
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.quant_utils import compute_scale_zp, get_qmin_qmax_for_qType

    paddle = _paddle()
    acts, symmetric, reduce_range = SCHEMES[scheme]
    grid = Grid.from_scheme(acts, symmetric, reduce_range)
    qtype = QuantType.QUInt8 if acts == "uint8" else QuantType.QInt8
    qmin, qmax = get_qmin_qmax_for_qType(qtype.tensor_type, reduce_range=False, symmetric=symmetric)
    x = np.random.default_rng(0).normal(0, 2, 4096).astype(np.float32)
    for lo, hi in ((-3.0, 5.0), (0.0, 6.0), (-1.5, 0.25)):
        if not reduce_range:        # onnxruntime reduces the range of weights, not activations
            assert (grid.qmin, grid.qmax) == (int(qmin), int(qmax))
            zp, scale = compute_scale_zp(np.float32(lo), np.float32(hi), qmin, qmax, symmetric=symmetric)
            want = (np.clip(np.round(x / scale) + zp, qmin, qmax) - zp) * scale
        else:
            want = None
        got = fake_quant(paddle, paddle.to_tensor(x), paddle.to_tensor(np.float32(lo)),
                         paddle.to_tensor(np.float32(hi)), grid).numpy()
        if want is not None:
            np.testing.assert_allclose(got, want, atol=1e-5 * max(abs(lo), abs(hi)))
        assert len(np.unique(got)) <= grid.qmax - grid.qmin + 1
        bound = (-max(-lo, hi), max(-lo, hi)) if symmetric else (min(lo, 0), max(hi, 0))
        step = (bound[1] - bound[0]) / (grid.qmax - grid.qmin)   # the zero point rounds: one step
        assert got.min() >= bound[0] - step and got.max() <= bound[1] + step


def test_weight_grid_is_per_channel_symmetric_and_ranges_learn():
    paddle = _paddle()
    w = np.random.default_rng(1).normal(0, 1, (8, 4, 3, 3)).astype(np.float32)
    w[3] *= 100.0                                   # a channel 100x the others keeps its own scale
    for wmax in (127, 64):
        q = fake_quant_weight(paddle, paddle.to_tensor(w), Grid(0, 255, False, wmax), 0).numpy()
        for c in range(8):
            scale = np.abs(w[c]).max() / wmax
            np.testing.assert_allclose(q[c], np.clip(np.round(w[c] / scale), -wmax, wmax) * scale, rtol=1e-5)
    # the straight-through estimator gives the range a gradient: clipped values pull it out
    hi = paddle.to_tensor(np.float32(1.0), stop_gradient=False)
    x = paddle.to_tensor(np.linspace(0, 3, 100).astype(np.float32))
    out = fake_quant(paddle, x, paddle.to_tensor(np.float32(0.0)), hi, Grid(0, 255, False, 127))
    loss = paddle.mean((out - x) ** 2)
    loss.backward()
    assert float(hi.grad) < 0             # raising the range lowers the error


def _graph(path):
    """x -> Conv(w1) -> Relu -> Conv(w2) -> y, the second conv's weight stored first."""
    rng = np.random.default_rng(2)
    w1 = rng.normal(0, 1, (4, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 1, (4, 4, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(w1, "w1")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return w1, w2


def _sig(w):
    w = w.astype("float64")
    return {"kind": "conv", "shape": list(w.shape), "sum": float(w.sum()), "sumsq": float((w ** 2).sum())}


def test_learned_ranges_find_their_tensors_by_the_kernels_weights(tmp_path):
    w1, w2 = _graph(tmp_path / "m.onnx")
    # the model lists its kernels in another order than the graph: the weights decide
    kernels = [_sig(w2), _sig(w1)]
    ranges = [{"kernel": 1, "where": "in", "fused_activation": False, "range": [-2.0, 2.0]},
              {"kernel": 1, "where": "out", "fused_activation": True, "range": [0.0, 5.0]},
              {"kernel": 0, "where": "out", "fused_activation": False, "range": [-7.0, 9.0]}]
    overrides, rec = onnx_overrides(tmp_path / "m.onnx", kernels, ranges)
    assert rec == {"mapped": 3, "ranges": 3, "skipped": 0}
    assert {k: [float(v[0]["rmin"]), float(v[0]["rmax"])] for k, v in overrides.items()} == \
        {"x": [-2.0, 2.0], "r1": [0.0, 5.0], "y": [-7.0, 9.0]}
    # a kernel whose weights are not in the graph maps nothing, and is counted
    other = _sig(w1 + 1.0)
    overrides, rec = onnx_overrides(tmp_path / "m.onnx", [_sig(w2), other], ranges)
    assert rec == {"mapped": 1, "ranges": 3, "skipped": 2} and list(overrides) == ["y"]
    overrides, rec = onnx_overrides(tmp_path / "m.onnx", [other], ranges[:1])
    assert overrides == {} and rec["mapped"] == 0 and "none of the model's 1" in rec["why"]


def test_rounding_is_half_to_even_as_onnxruntimes_quantizelinear():
    paddle = _paddle()
    grid = Grid.from_scheme("uint8", False, False)
    x = np.array([0.125, 0.375, 0.625, 1.125], np.float32)        # exact ties at scale 0.25
    got = fake_quant(paddle, paddle.to_tensor(x), paddle.to_tensor(np.float32(0.0)),
                     paddle.to_tensor(np.float32(255 * 0.25)), grid).numpy()
    np.testing.assert_array_equal(got, [0.0, 0.5, 0.5, 1.0])


def _residual_net(paddle):
    nn = paddle.nn

    class Block(nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2D(4, 4, 3, padding=1)

        def forward(self, x):
            return x + self.conv(x)

    class Net(nn.Layer):
        def __init__(self):
            super().__init__()
            self.stem, self.act, self.block = nn.Conv2D(3, 4, 3, padding=1), nn.ReLU6(), Block()
            self.head = nn.Conv2D(4, 4, 1)

        def forward(self, x):
            y = self.block(self.act(self.stem(x)))
            return self.head(y) + y            # y: read by a kernel and by a residual Add

    paddle.seed(0)
    return Net()


def test_a_tensor_a_kernel_and_an_add_read_is_quantized_once_for_both():
    from edgeforge.passes.fake_quant import Simulator

    paddle = _paddle()
    net = _residual_net(paddle)
    net.eval()
    x = paddle.to_tensor(np.random.default_rng(0).normal(0, 2, (8, 3, 8, 8)).astype(np.float32))
    sim = Simulator(paddle, net, Grid.from_scheme("uint8", False, False), [x])
    assert sim._upstream == {id(net.head): net.block}     # onnxruntime's Q/DQ sits on the block's sum
    seen = {}
    net.block.register_forward_post_hook(lambda layer, i, o: seen.__setitem__("y", o.numpy()))
    with paddle.no_grad():
        net(x)
    lo, hi = (float(v) for v in sim.ranges[(id(net.head), "in")].numpy())
    scale = (max(hi, 0) - min(lo, 0)) / 255
    steps = seen["y"] / scale                                   # (q - zero point) * scale
    assert np.abs(steps - np.round(steps)).max() < 1e-3        # what the Add reads is on the grid
    # a ReLU6's range stops at 6 (its Clip folds away): never a value past 6
    sim.ranges[(id(net.act), "out")].set_value(np.array([0.0, 9.0], np.float32))
    assert [r["range"][1] for r in sim.learned_ranges() if r["fused_activation"]] == [6.0]
