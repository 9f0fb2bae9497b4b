"""edgeforge load against a real sshd on loopback: the curve, the knee, the SLO pick, the report
round trip, the gates with JUnit, the open loop and the emulated-device mark."""
from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET

import pytest

from edgeforge.results.load import LOAD_SCHEMA, LoadResult, read_load_result

pytestmark = pytest.mark.device

FIGURES = ("inferences_per_s", "samples_per_s", "p50_ms", "p90_ms", "p99_ms", "max_ms", "errors",
           "cpu_util_pct", "peak_rss_mb")
LINE = re.compile(r"threads \d+, batch \d+, \d+ concurrent (requests?|sessions): "
                  r"[\d.]+ inf/s at p99 [\d.]+ ms")


@pytest.fixture(scope="module")
def onnx_build(digits_project, tmp_path_factory):
    """digits for linux-x86, ONNX INT8 (the build the bench tests use; no Lite build here)."""
    from edgeforge import api

    res = api.build(digits_project, "linux-x86", out=tmp_path_factory.mktemp("load") / "digits-linux-x86")
    assert res.verify_status == "passed"
    return res.out_dir


def _load(cli, lab, build, *extra, inventory=None):
    return cli("load", build, "--device", "local", "--inventory", inventory or lab.inventory(),
               "--results", lab.results, "--timeout", "300", *extra)


def test_curve_knee_slo_and_report_round_trip(cli, lab, onnx_build, tmp_path):
    code, out, err = _load(cli, lab, onnx_build, "--concurrency", "1,2,4", "--batch", "1,4",
                           "--duration", "0.5", "--slo-p99-ms", "1000")
    assert code == 0, err
    [path] = lab.result_files()
    r = read_load_result(path)
    assert r["schema"] == LOAD_SCHEMA and r["status"] == "ok" and r["device"]["name"] == "local"
    levels = r["levels"]
    # both session modes on onnxruntime: 2 sessions x 2 batches x 3 concurrencies
    assert len(levels) == 12
    assert {(lv["sessions"], lv["batch"], lv["concurrency"]) for lv in levels} == {
        (s, b, k) for s in ("shared", "own") for b in (1, 4) for k in (1, 2, 4)}
    for lv in levels:
        assert lv["mode"] == "closed" and lv["threads"] == 2 and lv["errors"] == 0 and lv["completed"] > 0
        assert all(lv[k] is not None for k in FIGURES)
        assert 0 < lv["p50_ms"] <= lv["p90_ms"] <= lv["p99_ms"] <= lv["max_ms"]
        assert lv["samples_per_s"] == pytest.approx(lv["inferences_per_s"] * lv["batch"])
        assert lv["inferences_per_s"] == pytest.approx(lv["completed"] / lv["elapsed_s"])
        assert 0 <= lv["cpu_util_pct"] <= 100 and lv["peak_rss_mb"] > 10
        assert lv["spinning"] is (lv["concurrency"] == 1)
        assert 0 < len(lv["samples_ms"]) <= lv["completed"]
    own4 = next(lv for lv in levels if lv["sessions"] == "own" and lv["concurrency"] == 4)
    shared4 = next(lv for lv in levels if lv["sessions"] == "shared" and lv["concurrency"] == 4)
    assert own4["peak_rss_mb"] > shared4["peak_rss_mb"]         # four processes, a session each
    assert "cpu_model" in r["device"]["fingerprint"] and r["lease"]["released_at"]
    assert r["runtime"]["providers"] == ["CPUExecutionProvider"]
    assert all(lv["providers"] == ["CPUExecutionProvider"] for lv in levels)
    # the knees: one verdict per series, printed; the SLO pick printed as one line to copy
    a = r["analysis"]
    assert len(a["knees"]) == 4 and a["slo_p99_ms"] == 1000
    assert out.count("knee (") == 4
    rec = a["recommendation"]
    assert LINE.fullmatch(rec["line"]) and rec["line"] in out
    best = max((lv for lv in levels if lv["p99_ms"] <= 1000), key=lambda lv: lv["inferences_per_s"])
    assert levels[rec["level"]] is not None and levels[rec["level"]]["inferences_per_s"] == best["inferences_per_s"]
    table = [ln for ln in out.splitlines() if not ln.startswith("result ")]
    assert max(map(len, table)) <= 80, max(table, key=len)
    # the JSON round-trips: through the model, and through `edgeforge report`
    doc = json.loads(path.read_text())
    assert LoadResult.check(doc).to_json() == doc
    code, rout, err = cli("report", lab.results, "--out", tmp_path / "report")
    assert code == 0, err
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    [entry] = summary["load"]
    assert entry["analysis"] == a and entry["artifact"]["sha256"] == r["artifact"]["sha256"]
    for got, lv in zip(entry["levels"], levels):
        assert {k: got[k] for k in FIGURES} == {k: lv[k] for k in FIGURES}
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Load curves" in md and rec["line"] in md
    html = (tmp_path / "report" / "report.html").read_text()
    assert 'id="load"' in html and "<svg" in html and "throughput (inferences/s)" in html
    assert rec["line"] in rout


def test_failing_throughput_gate_exits_1_with_junit(cli, lab, onnx_build, tmp_path):
    junit = tmp_path / "gates.xml"
    args = ("--concurrency", "1,2", "--duration", "0.3", "--sessions", "shared", "--junit", junit)
    code, out, err = _load(cli, lab, onnx_build, *args, "--min-throughput", "1e9")
    assert code == 1, err
    assert "min_throughput on local" in err and "1e+09 required" in err
    root = ET.parse(junit).getroot()
    assert root.get("failures") == "1" and root.get("tests") == "1"
    [case] = root.iter("testcase")
    assert case.get("name").startswith("min_throughput digits/linux-x86/onnx/int8@")
    assert case.find("failure") is not None
    assert len(lab.result_files()) == 1                  # the result is kept
    # the same run against a bar it clears passes
    code, _, err = _load(cli, lab, onnx_build, *args, "--min-throughput", "1")
    assert code == 0, err
    assert ET.parse(junit).getroot().get("failures") == "0"


def test_open_loop_counts_queueing_and_gates_p99_at_a_rate(cli, lab, onnx_build, tmp_path):
    junit = tmp_path / "p99.xml"
    code, out, err = _load(cli, lab, onnx_build, "--rate", "100,300", "--concurrency", "2", "--duration", "1",
                           "--sessions", "shared", "--max-p99-ms", "0.000001", "--junit", junit)
    assert code == 1, err
    [path] = lab.result_files()
    levels = read_load_result(path)["levels"]
    assert [(lv["mode"], lv["rate"], lv["concurrency"]) for lv in levels] == [("open", 100.0, 2), ("open", 300.0, 2)]
    for lv in levels:
        assert lv["offered"] > 0 and lv["completed"] + lv["errors"] + lv["unserved"] == lv["offered"]
        # Poisson arrivals at the rate: what was served is the offered load, not the device's peak
        assert lv["inferences_per_s"] == pytest.approx(lv["rate"], rel=0.5)
    root = ET.parse(junit).getroot()
    assert root.get("tests") == "2" and root.get("failures") == "2"
    assert "req/s" in out


def test_usage_errors_before_any_connection(cli, lab, onnx_build):
    code, _, err = _load(cli, lab, onnx_build, "--max-p99-ms", "5")
    assert code == 2 and "--rate" in err
    code, _, err = _load(cli, lab, onnx_build, "--junit", "x.xml")
    assert code == 2 and "needs a gate" in err
    code, _, err = _load(cli, lab, onnx_build, "--concurrency", "1,0")
    assert code == 2
    code, _, err = _load(cli, lab, onnx_build, "--concurrency", "1,2,4,8", "--duration", "60", "--timeout", "30")
    assert code == 2 and "timeout" in err
    assert lab.result_files() == []


def test_emulated_device_timings_are_labelled_and_not_gated(cli, lab, onnx_build):
    emu = lab.script("python-emulated", f'#!/bin/sh\nEDGEFORGE_EMULATED=qemu-user exec {sys.executable} "$@"\n')
    inv = lab.inventory(python=str(emu))
    args = ("--concurrency", "1,2", "--duration", "0.3", "--sessions", "shared", "--min-throughput", "1")
    code, out, err = _load(cli, lab, onnx_build, *args, inventory=inv)
    assert code == 2 and "emulated" in err
    [path] = lab.result_files()
    r = read_load_result(path)
    assert r["emulated"] == "qemu-user" and r["device"]["fingerprint"]["emulated"] == "qemu-user"
    assert "emulated device (qemu-user): these timings are not performance figures" in out
    code, _, err = _load(cli, lab, onnx_build, *args, "--force", inventory=inv)
    assert code == 0, err


KILL_AFTER_TWO_LEVELS = '''import os, signal, sys
if sys.argv and "edgeforge_runner-" in sys.argv[0] and sys.argv[0].endswith(".pyz") and sys.argv[1:2] == ["load"]:
    class _Out:
        levels = 0
        def __init__(self, s):
            self.s = s
        def write(self, text):
            n = self.s.write(text)
            if '"event": "level"' in text:
                _Out.levels += 1
                if _Out.levels == 2:
                    self.s.flush()
                    os.kill(os.getpid(), signal.SIGKILL)
            return n
        def __getattr__(self, name):
            return getattr(self.s, name)
    sys.stdout = _Out(sys.stdout)
'''


def test_runner_killed_mid_curve_keeps_the_levels_measured(cli, lab, onnx_build):
    hook = lab.root / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_AFTER_TWO_LEVELS)
    py = lab.script("python-dies", f'#!/bin/sh\nPYTHONPATH={hook} exec {sys.executable} "$@"\n')
    code, _, err = _load(cli, lab, onnx_build, "--concurrency", "1,2,4", "--duration", "0.3",
                         "--sessions", "shared", inventory=lab.inventory(python=str(py)))
    assert code == 4 and "runner crashed (SIGKILL)" in err, err
    [path] = lab.result_files()
    assert path.name.endswith("-load-incomplete.json") and str(path) in err.replace("\n", "")
    r = read_load_result(path)
    assert r["status"] == "incomplete" and "SIGKILL" in r["error"]
    assert [lv["concurrency"] for lv in r["levels"]] == [1, 2]
    assert all(lv["completed"] > 0 for lv in r["levels"])


@pytest.mark.needs_lite
def test_paddle_lite_runs_one_predictor_per_worker_process(cli, lab, digits_project, tmp_path):
    from edgeforge import api

    build = api.build(digits_project, "linux-x86", backend="lite", out=tmp_path / "digits-lite").out_dir
    code, _, err = _load(cli, lab, build, "--sessions", "shared")
    assert code == 2 and "not thread-safe" in err
    code, out, err = _load(cli, lab, build, "--concurrency", "1,2", "--duration", "0.3")
    assert code == 0, err
    [path] = lab.result_files()
    r = read_load_result(path)
    assert r["runtime"]["name"] == "paddlelite" and r["artifact"]["backend"] == "lite"
    assert [(lv["sessions"], lv["concurrency"]) for lv in r["levels"]] == [("own", 1), ("own", 2)]
    assert all(lv["completed"] > 0 and lv["errors"] == 0 for lv in r["levels"])
