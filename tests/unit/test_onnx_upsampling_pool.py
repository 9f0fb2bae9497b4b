"""``upsampling-pool-to-resize`` (docs/export.md fact 25): paddle2onnx's stride-0 form of an
adaptive pool that upsamples becomes a nearest Resize equal to the pool, sizes from the PIR
program; a non-integer factor is left for convert.onnx to refuse."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from edgeforge.errors import PassError
from edgeforge.passes.legalize.pir_json import adaptive_pool_sizes
from edgeforge.passes.onnx import check_converted
from edgeforge.passes.onnx_graph import fix_upsampling_pools


def _pool_model(op: str, hw: list[int], out: list[int]):
    node = helper.make_node(op, ["x"], ["p2o.pd_op.pool2d.0.0"], name=f"{op}.0", kernel_shape=hw, strides=[0, 0])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2, *hw])],
                              [helper.make_tensor_value_info("p2o.pd_op.pool2d.0.0", TensorProto.FLOAT, [None, 2, *out])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _adaptive(x: np.ndarray, out: list[int], reduce) -> np.ndarray:
    """Paddle's adaptive pooling, by its definition (bins [floor(i*H/O), ceil((i+1)*H/O)))."""
    h, w = x.shape[2:]
    y = np.empty(x.shape[:2] + tuple(out), x.dtype)
    for i in range(out[0]):
        for j in range(out[1]):
            hs, he = i * h // out[0], -(-(i + 1) * h // out[0])
            ws, we = j * w // out[1], -(-(j + 1) * w // out[1])
            y[:, :, i, j] = reduce(x[:, :, hs:he, ws:we], axis=(2, 3))
    return y


@pytest.mark.parametrize("op,reduce", [("AveragePool", np.mean), ("MaxPool", np.max)])
@pytest.mark.parametrize("hw,out", [([1, 1], [7, 7]), ([2, 2], [4, 4]), ([2, 3], [4, 6]), ([2, 2], [2, 6])])
def test_an_integer_upsampling_pool_becomes_the_same_resize(op, reduce, hw, out, tmp_path):
    model = _pool_model(op, hw, out)
    assert fix_upsampling_pools(model, {"p2o.pd_op.pool2d.0.0": (hw, out)}) == 1
    assert [n.op_type for n in model.graph.node] == ["Resize"]
    onnx.checker.check_model(model)
    onnx.save(model, tmp_path / "m.onnx")
    check_converted("convert.onnx", tmp_path / "m.onnx")
    x = np.random.default_rng(0).standard_normal([3, 2, *hw]).astype("float32")
    y = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, _adaptive(x, out, reduce))


@pytest.mark.parametrize("hw,out,pools", [
    ([2, 2], [3, 3], None),                    # a non-integer factor: bins of two pixels
    ([2, 2], [4, 4], {}),                      # no size from the program
    ([2, 2], [4, 4], ([1, 2], [4, 4])),        # the program's input is not the node's kernel
])
def test_other_stride_zero_pools_stay_and_are_refused(hw, out, pools, tmp_path):
    model = _pool_model("AveragePool", hw, out)
    sizes = {"p2o.pd_op.pool2d.0.0": (hw, out)} if pools is None else (
        {"p2o.pd_op.pool2d.0.0": pools} if pools else {})
    assert fix_upsampling_pools(model, sizes) == 0
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(PassError, match=r"strides \[0, 0\]"):
        check_converted("convert.onnx", tmp_path / "m.onnx")


def test_pool_sizes_come_from_the_program_by_paddle2onnx_names():
    def op(name, src, dst, shape, **attrs):
        a = [{"N": k, "AT": {"#": "0.a_x", "D": v}} for k, v in attrs.items()]
        return {"#": name, "A": a, "I": [{"%": src}] if src else [],
                "O": [{"%": dst, "TT": {"#": "0.t_dtensor", "D": [{"#": "0.t_f32"}, shape, "NCHW", [], 0]}}]}

    program = {"program": {"regions": [{"blocks": [{"ops": [
        op("1.conv2d", 1, 2, [-1, 8, 2, 2]),
        op("1.pool2d", 2, 3, [-1, 8, 1, 1], adaptive=True, global_pooling=True),      # global: skipped
        op("1.pool2d", 2, 4, [-1, 8, 4, 4], adaptive=True, global_pooling=False, data_format="NCHW"),
        op("1.max_pool2d_with_index", 2, 5, [-1, 8, 6, 2], adaptive=True, global_pooling=False),
        op("1.pool2d", 2, 6, [-1, 8, 1, 1], adaptive=False, global_pooling=False),    # not adaptive
    ]}]}]}}
    assert adaptive_pool_sizes(program) == {"p2o.pd_op.pool2d.1.0": ([2, 2], [4, 4]),
                                            "p2o.pd_op.max_pool2d_with_index.0.0": ([2, 2], [6, 2])}
