"""The on-device runner's placement record, load timing and per-batch-size predictors, and the
--min-accelerated-nodes gate. Real onnxruntime on a small real ONNX model; no paddle."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeforge.errors import ConfigError
from edgeforge.report.gates import evaluate_gates, placement_gate
from edgeforge.runner.onnx_proto import onnx_nodes
from edgeforge.runner.placement import count_placement, onnx_placement, placement_summary
from edgeforge.runner.predictors import load_twice, onnx_predictor, predict_per_batch_size, provider_entries


def _model(path, unnamed=False):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 4)).astype("float32"), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="" if unnamed else "mm"),
         helper.make_node("Relu", ["h"], ["r"], name="relu"),
         helper.make_node("Constant", [], ["c"], name="two", value=numpy_helper.from_array(np.float32(2))),
         helper.make_node("Mul", ["r", "c"], ["y"], name="mul")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_the_runner_reads_node_names_without_the_onnx_package(tmp_path):
    path = _model(tmp_path / "m.onnx")
    assert onnx_nodes(path) == [(n.name, n.op_type) for n in onnx.load(str(path)).graph.node]


def test_placement_counts_every_node_on_the_provider_that_ran_it(tmp_path):
    path = _model(tmp_path / "m.onnx")
    one = {"x": np.ones((1, 16), np.float32)}
    p = onnx_placement(path, ["CPUExecutionProvider"], one)
    assert p["nodes"] == 3                               # the Constant is an initializer, not a node run
    assert p["by_provider"] == {"CPUExecutionProvider": 3}
    assert p["summary"] == "3/3 nodes on CPUExecutionProvider" and "warning" not in p
    assert p["accelerated"] == 0


def test_a_target_whose_first_provider_is_missing_gets_a_partial_placement_warning(tmp_path):
    path = _model(tmp_path / "m.onnx")
    one = {"x": np.ones((1, 16), np.float32)}
    p = onnx_placement(path, ["TensorrtExecutionProvider", "CPUExecutionProvider"], one,
                              {"TensorrtExecutionProvider": {"trt_int8_enable": True}}, str(tmp_path / "cache"))
    assert p["summary"] == "0/3 nodes on TensorrtExecutionProvider"
    assert p["warning"] == "partial placement: 0/3 nodes on TensorrtExecutionProvider; 3 on CPUExecutionProvider"
    assert not (tmp_path / "cache").exists()             # no TensorRT here: no engine cache made


def test_tensorrt_gets_its_options_and_the_engine_cache():
    entries = provider_entries(["TensorrtExecutionProvider", "CPUExecutionProvider"],
                                      {"TensorrtExecutionProvider": {"trt_int8_enable": True, "trt_fp16_enable": True}},
                                      "/w/abc/trt_cache")
    assert entries == [("TensorrtExecutionProvider", {
        "trt_int8_enable": True, "trt_fp16_enable": True, "trt_engine_cache_enable": True,
        "trt_engine_cache_path": "/w/abc/trt_cache", "trt_timing_cache_enable": True,
        "trt_timing_cache_path": "/w/abc/trt_cache"}), "CPUExecutionProvider"]
    # providers this onnxruntime lacks are dropped, CPU stays
    assert provider_entries(["TensorrtExecutionProvider"], None, None, ["CPUExecutionProvider"]) == \
        ["CPUExecutionProvider"]


def test_load_twice_times_two_loads_and_keeps_the_second(tmp_path):
    path = _model(tmp_path / "m.onnx")
    made = []

    def make():
        made.append(onnx_predictor(path))
        return made[-1]

    run, load = load_twice(make, {"x": np.ones((1, 16), np.float32)})
    assert run is made[1] and len(made) == 2
    assert load["first_ms"] > 0 and load["warm_ms"] > 0


def test_each_batch_size_gets_its_own_predictor():
    seen = []                                          # (predictor id, batch size) per run

    def make():
        me = len(seen) and max(i for i, _ in seen) + 1

        def run(feeds):
            seen.append((me, len(feeds["x"])))
            return [feeds["x"] * 2]
        return run

    x = np.arange(150, dtype=np.float32).reshape(150, 1)
    outs, created = predict_per_batch_size(make, {"x": x}, batch=64)
    np.testing.assert_array_equal(outs[0], x * 2)
    assert created == {"64": 1, "22": 1}
    sizes = {}
    for pred, size in seen:
        sizes.setdefault(pred, set()).add(size)
    assert all(len(s) == 1 for s in sizes.values()) and len(sizes) == 2


def _result(placement, name="orin-1"):
    return {"device": {"name": name, "fingerprint": {}}, "artifact": {"sha256": "a" * 64, "target": "jetson-orin",
            "backend": "onnx", "precision": "int8", "name": "digits"}, "runtime": {"placement": placement},
            "settings": {}, "samples_ms": [1.0], "summary": {"p50_ms": 1.0}}


def test_the_accelerated_nodes_gate_holds_only_when_asked_and_fails_when_unmeasured():
    full = placement_summary({"TensorrtExecutionProvider": 49}, 49, "TensorrtExecutionProvider", [])
    cpu = placement_summary({"CPUExecutionProvider": 49}, 49, "TensorrtExecutionProvider", [])
    assert evaluate_gates([_result(cpu)]) == []
    assert placement_gate(_result(full), 1.0).passed
    g = placement_gate(_result(cpu), 0.5)
    assert not g.passed and g.measured == 0.0 and "0/49 nodes on TensorrtExecutionProvider" in g.message
    assert not placement_gate(_result(None), 0.1).passed
    [g] = evaluate_gates([_result(cpu)], min_accelerated_nodes=0.9)
    assert g.name == "min_accelerated_nodes" and not g.passed
    with pytest.raises(ConfigError):
        evaluate_gates([], min_accelerated_nodes=2)


def _ev(node, provider, op):
    return {"cat": "Node", "name": f"{node}_kernel_time", "args": {"provider": provider, "op_name": op}}


def test_nodes_inside_a_tensorrt_kernel_count_for_tensorrt_and_copies_do_not():
    """The shape of a TensorRT EP profile: one fused kernel for most nodes, a node TensorRT left
    to CPU, and the copies onnxruntime inserts between providers."""
    nodes = [f"n{i}" for i in range(10)]
    events = [_ev("TensorrtExecutionProvider_TRTKernel_graph_main_0_0", "TensorrtExecutionProvider", "TRTKernel_0"),
              _ev("n9", "CPUExecutionProvider", "NonMaxSuppression"),
              _ev("Memcpy_token_1", "CUDAExecutionProvider", "MemcpyToHost"),
              {"cat": "Session", "name": "model_run", "args": {}}]
    counts = count_placement(events, nodes)
    assert counts == {"TensorrtExecutionProvider": 9, "CPUExecutionProvider": 1}
    p = placement_summary(counts, 10, "TensorrtExecutionProvider", [])
    assert p["summary"] == "9/10 nodes on TensorrtExecutionProvider" and p["accelerated"] == 9
    assert p["warning"] == "partial placement: 9/10 nodes on TensorrtExecutionProvider; 1 on CPUExecutionProvider"
    # nodes the profile never lists and no compiled kernel ran: unplaced, not invented
    assert count_placement([_ev("n0", "CPUExecutionProvider", "Conv")], ["n0", "n1"]) == {
        "CPUExecutionProvider": 1, "unplaced": 1}


def test_cli_gate_min_accelerated_nodes_exits_1_only_when_asked(tmp_path, capsys):
    from edgeforge.cli import main
    from edgeforge.results.schema import write_result

    cpu = placement_summary({"CPUExecutionProvider": 49}, 49, "TensorrtExecutionProvider", [])
    r = _result(cpu)
    r.update(schema="edgeforge.bench/1", status="ok", transfer={"uploaded_bytes": 0, "seconds": 0})
    r["device"]["fingerprint"] = {k: None for k in ("cpu_model", "kernel", "governor", "temp_c_before",
                                                    "temp_c_after", "load_avg")}
    r["runtime"].update(name="onnxruntime", version="1.23.2")
    r["settings"] = {"warmups": 0, "runs": 1, "threads": 1}
    r["summary"] = {k: 1.0 for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "mad_ms", "peak_rss_mb")}
    r["drift"] = {k: None for k in ("top1_agreement", "accuracy", "float_accuracy", "max_abs_error", "cosine")}
    r["drift"]["accuracy_drop"] = 0.0
    write_result(tmp_path / "res", r)
    assert main(["gate", str(tmp_path / "res"), "--min-accelerated-nodes", "0.9"]) == 1
    assert "0/49 nodes accelerated" in capsys.readouterr().err
    assert main(["gate", str(tmp_path / "res"), "--max-accuracy-drop", "1"]) == 0


def test_a_run_records_the_threads_and_power_mode_its_runtime_applied():
    """Never more threads than the device has cores; a power mode only for Paddle Lite (issue 46)."""
    import os

    from edgeforge.runner.predictors import applied_settings

    many = {"threads": 4096, "power_mode": "LITE_POWER_HIGH"}
    assert applied_settings(many, "onnx") == (os.cpu_count(), None)
    assert applied_settings({"threads": 1, "power_mode": "LITE_POWER_HIGH"}, "lite") == (1, "LITE_POWER_HIGH")
