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
    prof = read_result(int8_path).profile
    ops = [o.op for o in prof.by_op]
    # the digits INT8 graph after onnxruntime's fusions: integer convolutions and QDQ nodes
    assert any(op in ("QLinearConv", "ConvInteger", "QLinearMatMul") for op in ops[:4]), ops
    assert {"QuantizeLinear", "DequantizeLinear"} & set(ops), ops
    assert abs(sum(o.share for o in prof.by_op) - 1.0) < 1e-3
    assert prof.by_node[0].ms == max(n.ms for n in prof.by_node) > 0
    assert sum(o.nodes for o in prof.by_op) == prof.nodes and prof.runs == 30

    code, out, err = cli("profile", int8_path)
    assert code == 0, err
    assert ops[0] in out and "quantize/dequantize:" in out

    code, _, err = _bench(cli, lab, fp32_build)
    assert code == 0, err
    [fp32_path] = [p for p in lab.result_files() if p != int8_path]
    code, out, err = cli("profile", fp32_path, int8_path)
    assert code == 0, err
    assert "Conv" in out and "A/B" in out and "quantize/dequantize: A 0.0%" in out


def _benchmark_bin(lab, profile_log: str | None):
    """A stand-in for Paddle Lite's benchmark_bin (no ARM board or Lite C++ build here): it prints
    the Perf Info block, and when ``profile_log`` is given and it runs more than one repeat, the
    profiler's log as a --with_profile=ON build writes it on stderr (lite_profile_text)."""
    from lite_profile_text import perf_info

    perf = lab.root / "perf.txt"
    perf.write_text(perf_info(1.0))
    prof = lab.root / "profile.txt"
    if profile_log is not None:
        prof.write_text(profile_log)
    return lab.script("benchmark_bin", f"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "benchmark_bin version: v2.13-stub"; exit 0; fi
cat {perf}
case "$*" in *--repeats=1\\ *|*--repeats=1) exit 0;; esac
[ -f {prof} ] && cat {prof} >&2
exit 0
""")


@pytest.mark.needs_lite
def test_lite_profile_through_benchmark_bin(cli, lab, builds):
    from lite_profile_text import KERNELS, lite_log

    inv = lab.inventory(benchmark_bin=str(_benchmark_bin(lab, lite_log())))
    code, _, err = cli("bench", builds.lite, "--device", "local", "--inventory", inv, "--results", lab.results,
                       "--runs", "3", "--profile", "-q")
    assert code == 0, err
    [path] = lab.result_files()
    prof = read_result(path).profile
    assert prof.by_op[0].op == "conv2d" and prof.nodes == len(KERNELS)
    assert prof.method.startswith("Paddle Lite profiler") and prof.runs == 30
    code, out, err = cli("profile", path)
    assert code == 0, err
    assert "conv2d" in out and "quantize/dequantize: 3.0%" in out


@pytest.mark.needs_lite
def test_a_benchmark_bin_without_the_profiler_says_how_to_get_one(cli, lab, builds):
    inv = lab.inventory(benchmark_bin=str(_benchmark_bin(lab, None)))
    code, _, err = cli("bench", builds.lite, "--device", "local", "--inventory", inv, "--results", lab.results,
                       "--runs", "2", "--profile", "-q")
    assert code == 0, err
    [path] = lab.result_files()
    assert "--with_profile=ON" in read_result(path).profile.skipped
    code, _, err = cli("profile", path)
    assert code == 2 and "--with_profile=ON" in err and len(err.strip().splitlines()) == 1
