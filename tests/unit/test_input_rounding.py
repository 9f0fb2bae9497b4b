"""quant.input_rounding: the evaluation inputs rounded exactly as the shipped graph's
QuantizeLinear rounds them (onnxruntime, value for value), and the float model's loss to that
rounding in the budget's terms; and passes.qat.decide, the QAT decision that names it."""
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
    # with labels the share is of the accuracy budget, in points
    labelled = Budget(max_accuracy_drop=2.0, min_cosine=0.99, labelled=True)
    assert labelled.share({"accuracy_drop": 0.5, "cosine": 0.5}) == 0.25
    assert labelled.share({"accuracy_drop": -1.0, "cosine": 1.0}) == 0.0
    assert Budget(max_accuracy_drop=0.0, min_cosine=1.0, labelled=True).share({"accuracy_drop": 0.0, "cosine": 1.0}) is None


def test_an_input_read_in_float_has_no_probe(tmp_path):
    model = _qdq_model(tmp_path / "m.onnx", 0.1, 0, np.uint8, quantize_input=False)
    x = np.ones((2, 8), np.float32)
    budget = Budget(max_accuracy_drop=1.0, min_cosine=0.99, labelled=False)
    assert input_grids(model) == {} and input_rounding(model, {"x": x}, [x], None, lambda f: [f["x"]], budget) is None
    assert advice(None) == ""


def _m(cos: float, drop: float = 0.0) -> dict:
    return {"cosine": cos, "accuracy_drop": drop}


def test_the_qat_decision_says_why():
    """passes.qat.decide: the measured cases of docs/qat.md (2026-12-05)."""
    from edgeforge.passes.qat import decide

    budget = Budget(max_accuracy_drop=1.0, min_cosine=0.99, labelled=False)
    probe = {"share_of_budget": 0.35, "figure": "cosine 0.9965"}
    # the zoo recipe's mobilenet_v2: PTQ kept 2 layers in float, QAT missed; the input's rounding is named
    shipped, why = decide(budget, _m(0.9829), _m(0.9905), [], ["a", "b"], probe)
    assert shipped == "ptq" and why.startswith("QAT missed the budget") and "35% of the budget" in why
    assert "train it further" not in decide(budget, _m(0.9829), _m(0.9905), [], ["a"], dict(probe, share_of_budget=0.1))[1]
    # QAT removed the float layers within the budget: it ships, nothing more to say
    assert decide(budget, _m(0.993), _m(0.991), [], ["a"]) == ("qat", "every layer INT8 within the budget: cosine 0.9930")
    # --qat on a model PTQ already had all INT8, and PTQ measured better (mobilenet_v1, 400 steps)
    shipped, why = decide(budget, _m(0.9955), _m(0.9960), [], [])
    assert shipped == "qat" and "PTQ kept every layer INT8 too and measured better (cosine 0.9960)" in why
    assert "--no-qat" in why and "measured better" not in decide(budget, _m(0.9938), _m(0.9926), [], [])[1]
    # a layer QAT could not quantize keeps PTQ
    assert decide(budget, _m(0.999), _m(0.99), ["conv_3"], ["conv_3"])[0] == "ptq"
