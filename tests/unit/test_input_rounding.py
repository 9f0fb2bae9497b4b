"""quant.input_rounding: the evaluation inputs rounded exactly as the shipped graph's
QuantizeLinear rounds them (onnxruntime, value for value), and the float model's loss to that
rounding in the budget's terms."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeforge.quant.budget import Budget
from edgeforge.quant.input_rounding import advice, input_grids, input_rounding, round_inputs


def _qdq_model(path, scale: float, zero: int, dtype, quantize_input: bool = True):
    """x -> QuantizeLinear -> DequantizeLinear -> Relu -> y (or x -> Relu -> y)."""
    inits = [numpy_helper.from_array(np.array(scale, np.float32), "s"),
             numpy_helper.from_array(np.array(zero, dtype), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Relu", ["xd"], ["y"])] if quantize_input else \
        [helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8])],
                              inits if quantize_input else [])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


@pytest.mark.parametrize("dtype,zero", [(np.uint8, 128), (np.uint8, 0), (np.int8, 0)])
def test_rounding_is_quantizelinears_value_for_value(tmp_path, dtype, zero):
    scale = 0.0157
    model = _qdq_model(tmp_path / "m.onnx", scale, zero, dtype)
    rng = np.random.default_rng(0)
    x = rng.uniform(-3, 3, (64, 8)).astype(np.float32)
    x[0, :4] = np.array([0.5, 1.5, 2.5, -0.5], np.float32) * np.float32(scale)    # ties: half to even
    x[1, :2] = [1e3, -1e3]                                                          # saturation
    grids = input_grids(model)
    assert set(grids) == {"x"} and grids["x"][1] == zero
    got = round_inputs({"x": x}, grids)["x"]
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(np.maximum(got, 0), want)
    assert not np.array_equal(got, x)


def test_loss_is_judged_in_the_budgets_terms_and_advised_when_large(tmp_path):
    model = _qdq_model(tmp_path / "m.onnx", 0.25, 128, np.uint8)       # a coarse grid
    x = np.random.default_rng(1).normal(size=(32, 8)).astype(np.float32)
    budget = Budget(max_accuracy_drop=1.0, min_cosine=0.99, labelled=False)

    def run(feeds):                       # a "model" that amplifies its input's fine detail
        return [np.sin(40 * feeds["x"])]

    probe = input_rounding(model, {"x": x}, run({"x": x}), None, run, budget)
    assert probe["inputs"] == ["x"] and probe["measured"]["cosine"] < 0.99
    assert probe["share_of_budget"] > 1.0 and "train it further" in advice(probe)
    gentle = input_rounding(model, {"x": x}, [x], None, lambda f: [f["x"]], budget)
    assert 0 < gentle["share_of_budget"] < 1.0 and gentle["measured"]["cosine"] > 0.99


def test_an_input_read_in_float_has_no_probe(tmp_path):
    model = _qdq_model(tmp_path / "m.onnx", 0.1, 0, np.uint8, quantize_input=False)
    x = np.ones((2, 8), np.float32)
    budget = Budget(max_accuracy_drop=1.0, min_cosine=0.99, labelled=False)
    assert input_grids(model) == {} and input_rounding(model, {"x": x}, [x], None, lambda f: [f["x"]], budget) is None
    assert advice(None) == ""
