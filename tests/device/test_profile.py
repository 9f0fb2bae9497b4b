"""bench --profile on the loopback device: onnxruntime's node profiler per node and per op
type in the result; `edgeforge profile` names the top ops, and for fp32 vs INT8 the per-op
speed-up and the quantize/dequantize share (issue 18)."""
from __future__ import annotations

import pytest

from edgeforge.results.schema import read_result

pytestmark = pytest.mark.device


def _bench(cli, lab, build):
    return cli("bench", build, "--device", "local", "--inventory", lab.inventory(), "--results", lab.results,
               "--runs", "10", "--warmups", "2", "--profile", "-q")


def test_profile_of_an_int8_build_names_its_top_ops(cli, lab, builds, fp32_build, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    code, _, err = _bench(cli, lab, builds.onnx)
    assert code == 0, err
    [int8_path] = lab.result_files()
    prof = read_result(int8_path)["profile"]
    ops = [o["op"] for o in prof["by_op"]]
    # the digits INT8 graph after onnxruntime's fusions: integer convolutions and QDQ nodes
    assert any(op in ("QLinearConv", "ConvInteger", "QLinearMatMul") for op in ops[:4]), ops
    assert {"QuantizeLinear", "DequantizeLinear"} & set(ops), ops
    assert abs(sum(o["share"] for o in prof["by_op"]) - 1.0) < 1e-3
    assert prof["by_node"][0]["ms"] == max(n["ms"] for n in prof["by_node"]) > 0
    assert sum(o["nodes"] for o in prof["by_op"]) == prof["nodes"] and prof["runs"] == 30

    code, out, err = cli("profile", int8_path)
    assert code == 0, err
    assert ops[0] in out and "quantize/dequantize:" in out

    code, _, err = _bench(cli, lab, fp32_build)
    assert code == 0, err
    [fp32_path] = [p for p in lab.result_files() if p != int8_path]
    code, out, err = cli("profile", fp32_path, int8_path)
    assert code == 0, err
    assert "Conv" in out and "A/B" in out and "quantize/dequantize: A 0.0%" in out
