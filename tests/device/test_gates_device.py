"""Quality gates on bench, run and a fleet bench: a failed gate exits 1 and writes JUnit (one
test case per gate, per device); a device failure takes precedence (exit 4)."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

pytestmark = pytest.mark.device


def _cases(junit):
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    out = {}
    for suite in root.findall("testsuite"):
        for case in suite.findall("testcase"):
            gate = case.get("name").split(" ", 1)[0]
            out[(suite.get("name").rsplit(".", 1)[-1], gate)] = case.find("failure")
    return root, out


def test_fleet_gate_failure_exits_1_with_junit_per_gate_per_device(cli, make_fleet, builds, tmp_path):
    fleet = make_fleet(2)
    junit = tmp_path / "gates.xml"
    code, out, err = cli("bench", builds.onnx, "--devices", "all", "--inventory", fleet.inventory,
                         "--results", fleet.results, "--runs", "3", "--warmups", "1", "-q",
                         "--max-p50-ms", "0.0001", "--max-accuracy-drop", "5", "--junit", junit)
    assert code == 1, err
    assert "2 of 4 gates failed" in err
    root, cases = _cases(junit)
    assert root.get("tests") == "4" and root.get("failures") == "2"
    assert set(cases) == {(d, g) for d in ("dev-a", "dev-b") for g in ("max_p50_ms", "max_accuracy_drop")}
    for d in ("dev-a", "dev-b"):
        assert cases[(d, "max_accuracy_drop")] is None                     # passed
        fail = cases[(d, "max_p50_ms")]
        assert fail is not None and fail.get("type") == "max_p50_ms" and "> 0.0001 ms allowed" in fail.get("message")


def test_device_failure_takes_precedence_over_a_failed_gate(cli, make_fleet, builds, tmp_path):
    fleet = make_fleet(2)
    fleet.sshd("dev-b").stop()
    junit = tmp_path / "gates.xml"
    code, out, err = cli("bench", builds.onnx, "--devices", "all", "--inventory", fleet.inventory,
                         "--results", fleet.results, "--runs", "3", "--warmups", "1", "-q", "--retries", "0",
                         "--max-p50-ms", "0.0001", "--junit", junit)
    assert code == 4, err
    assert "error: 1 of 2 devices failed: dev-b (cannot reach" in err
    _, cases = _cases(junit)                                              # still written for dev-a
    assert set(cases) == {("dev-a", "max_p50_ms")} and cases[("dev-a", "max_p50_ms")] is not None


def test_single_bench_and_run_gates(cli, lab, builds, fp32_build, tmp_path):
    inv = lab.inventory()
    common = ["--device", "local", "--inventory", inv, "--results", lab.results, "--runs", "3", "--warmups", "1", "-q"]
    # --junit without a gate, or a bad threshold: exit 2 before anything runs
    code, _, err = cli("bench", builds.onnx, *common, "--junit", tmp_path / "x.xml")
    assert code == 2 and "--junit needs a gate" in err
    code, _, err = cli("bench", builds.onnx, *common, "--max-p50-ms", "-1")
    assert code == 2
    assert not lab.result_files()
    # the fp32 run of an earlier bench is the reference of the INT8 speed-up gate
    assert cli("bench", fp32_build, *common)[0] == 0
    junit = tmp_path / "speedup.xml"
    code, out, err = cli("bench", builds.onnx, *common, "--min-int8-speedup", "0.01", "--max-accuracy-drop", "5",
                         "--junit", junit)
    assert code == 0, err
    _, cases = _cases(junit)
    assert set(cases) == {("local", "min_int8_speedup"), ("local", "max_accuracy_drop")}
    assert all(v is None for v in cases.values())
    code, out, err = cli("bench", builds.onnx, *common, "--min-int8-speedup", "1000")
    assert code == 1 and "min_int8_speedup on local" in err
    # run: build (cached) + bench + gates
    code, out, err = cli("run", builds.project, "--target", "linux-x86", *common, "--out", tmp_path / "b",
                         "--max-p50-ms", "0.0001", "--junit", tmp_path / "run.xml")
    assert code == 1 and "max_p50_ms on local" in err
    _, cases = _cases(tmp_path / "run.xml")
    assert cases[("local", "max_p50_ms")] is not None
