"""A build benched in a local headless Chromium (transport = "browser"): the same bench result as
an SSH device, drift equal to host verify, the fingerprint of the page, failures as exit 4, and no
browser process after the verb (issue 49)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgeforge.device.browser.chromium import group_processes
from edgeforge.results.schema import read_result

pytestmark = pytest.mark.web

REPO = Path(__file__).resolve().parents[2]


def _results(d: Path) -> list[dict]:
    return [read_result(p).to_json() for p in sorted(Path(d).glob("*.json"))]


def test_fp32_and_int8_match_host_verify_and_feed_report_compare_gate(cli, web_builds, web_lab, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    inv, res = web_lab
    got = {}
    for prec, build in (("fp32", web_builds.fp32), ("int8", web_builds.int8)):
        code, out, err = cli("bench", build, "--device", "chromium", "--inventory", inv, "--results", res,
                             "--runs", "30", "--warmups", "3")
        assert code == 0, err
        got[prec] = out
    results = {r["artifact"]["precision"]: r for r in _results(res)}
    assert set(results) == {"fp32", "int8"}
    for prec, r in results.items():
        host = r["build"]["host_verify"]
        assert r["status"] == "ok" and len(r["samples_ms"]) == 30
        assert r["drift"]["top1_agreement"] == host["top1_agreement"], prec
        assert abs(r["drift"]["cosine"] - host["cosine"]) <= 1e-4, prec
        assert r["drift"]["accuracy"] == pytest.approx(host["accuracy"], abs=1 / 540 + 1e-9)
        fp = r["device"]["fingerprint"]
        assert fp["cross_origin_isolated"] is True and fp["threads"] == 2 and fp["wasm_threads"] is True
        assert fp["wasm_simd"] is True and fp["browser_version"] and "HeadlessChrome" in fp["user_agent"]
        assert fp["workers_started"] >= 1
        assert r["runtime"]["name"] == "onnxruntime-web" and r["runtime"]["version"] == "1.31.1"
        assert r["settings"]["runner"] == "browser" and r["device"]["transport"] == "browser"
    assert results["fp32"]["drift"]["max_abs_error"] < 1e-4
    # the INT8 verdict against the browser's own fp32 run comes first
    assert "verdict: INT8" in got["int8"].replace("\n", " ")
    code, out, err = cli("report", res, "--out", tmp_path / "report")
    assert code == 0, err
    devices = (tmp_path / "report" / "report.md").read_text().split("## Devices")[1].split("##")[0]
    assert "| browser |" in devices and "Chromium " in devices and "(headless)" in devices
    assert "onnxruntime-web 1.31.1" in devices
    files = sorted(Path(res).glob("*.json"))
    code, out, err = cli("compare", *files)
    assert code == 0, err
    code, out, err = cli("gate", res, "--max-p50-ms", "10000", "--max-accuracy-drop", "5")
    assert code == 0, err + out


def test_sweep_over_threads_runs_on_the_browser(cli, web_builds, web_lab, tmp_path):
    inv, res = web_lab
    code, out, err = cli("sweep", web_builds.project, "--target", "web-wasm", "--device", "chromium",
                         "--inventory", inv, "--results", res, "--out", tmp_path / "b", "--precisions", "fp32",
                         "--threads", "1,2", "--runs", "5", "--warmups", "1", "-q")
    assert code == 0, err
    threads = sorted((r["settings"]["threads"], r["device"]["fingerprint"]["threads"]) for r in _results(res))
    assert threads == [(1, 1), (2, 2)]


def test_a_page_that_is_not_isolated_is_exit_4_in_one_line(cli, web_builds, web_lab):
    inv, res = web_lab
    code, out, err = cli("bench", web_builds.fp32, "--device", "open-page", "--inventory", inv, "--results", res)
    assert code == 4
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "not cross-origin isolated" in lines[0] and "Traceback" not in err
    # one thread needs no isolation: the same device then measures
    code, out, err = cli("bench", web_builds.fp32, "--device", "open-page", "--inventory", inv, "--results", res,
                         "--threads", "1", "--runs", "5", "--warmups", "1")
    assert code == 0, err
    fp = _results(res)[-1]["device"]["fingerprint"]
    assert fp["cross_origin_isolated"] is False and fp["threads"] == 1


def test_a_page_past_its_deadline_is_exit_4(cli, web_builds, web_lab):
    inv, res = web_lab
    t0 = time.monotonic()
    code, out, err = cli("bench", web_builds.fp32, "--device", "chromium", "--inventory", inv, "--results", res,
                         "--runs", "1000000", "--warmups", "1", "--timeout", "8", "--connect-timeout", "30")
    assert code == 4 and "did not finish within 38s (during the timed runs)" in err, err
    assert time.monotonic() - t0 < 38 + 30
    (kept,) = _results(res)         # the samples measured before the deadline
    assert kept["status"] == "incomplete" and 0 < len(kept["samples_ms"]) < 1000000


def _chromedriver_of(pid: int) -> int | None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                comm = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if int(stat[1]) == pid and comm == "chromedriver":
                return int(entry.name)
    return None


def test_sigterm_leaves_no_chromium_or_chromedriver_behind(web_builds, web_lab):
    inv, res = web_lab
    proc = subprocess.Popen([sys.executable, "-m", "edgeforge.cli", "bench", str(web_builds.fp32), "--device",
                             "chromium", "--inventory", str(inv), "--results", str(res), "--runs", "100000",
                             "--timeout", "120"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "COLUMNS": "200"})
    try:
        driver = None
        deadline = time.monotonic() + 60
        while driver is None and time.monotonic() < deadline and proc.poll() is None:
            driver = _chromedriver_of(proc.pid)
            time.sleep(0.1)
        assert driver is not None, "no chromedriver started"
        pgid = os.getpgid(driver)
        assert pgid != os.getpgid(0)
        end = time.monotonic() + 60
        while time.monotonic() < end and not any(
                (Path(f"/proc/{p}/comm").read_text().strip() == "chromium") for p in group_processes(pgid)
                if Path(f"/proc/{p}/comm").exists()):
            time.sleep(0.1)
        time.sleep(3)       # the page is loaded and timing
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted (SIGTERM)" in err and "Traceback" not in err
    assert group_processes(pgid) == []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            assert int(stat[1]) != proc.pid, "a child of the bench outlived it"
    kept = json.loads(sorted(Path(res).glob("*-incomplete.json"))[-1].read_text()) if list(
        Path(res).glob("*-incomplete.json")) else None
    if kept is not None:
        assert kept["status"] == "incomplete" and kept["samples_ms"]


def test_devices_check_opens_a_page_and_reports_isolation(cli, web_ready, web_lab):
    inv, _ = web_lab
    code, out, err = cli("devices", "check", "chromium", "--inventory", inv, "--json")
    assert code == 0, err
    report = json.loads(out)
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["cross-origin isolated"]["ok"] and checks["wasm SIMD"]["ok"] and checks["one major version"]["ok"]
    assert report["runtimes"]["onnxruntime-web"]["version"] == "1.31.1" and report["matches"]
    code, out, err = cli("devices", "check", "open-page", "--inventory", inv, "--json")
    assert code == 0, err       # isolation is optional on a device that asks for none
    checks = {c["check"]: c for c in json.loads(out)["checks"]}
    assert not checks["cross-origin isolated"]["ok"] and not checks["cross-origin isolated"]["required"]


def _failing_build(src: Path, dest: Path) -> Path:
    """``src`` with an artifact that loads but cannot run: its Expand asks for a tensor larger
    than onnxruntime-web allows (the manifest's sha256 updated, as a real build would have it)."""
    import hashlib
    import shutil

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    shutil.copytree(src, dest)
    shape = numpy_helper.from_array(np.array([1, 20000, 20000, 1024], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["f"], axis=1), helper.make_node("Expand", ["f", "shape"], ["e"]),
         helper.make_node("ReduceMean", ["e"], ["out"], axes=[1, 2, 3], keepdims=0)], "too-large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 32, 32])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], initializer=[shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(dest / "model.onnx"))
    manifest = json.loads((dest / "manifest.json").read_text())
    data = (dest / "model.onnx").read_bytes()
    manifest["artifact"].update(sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data))
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def test_a_run_that_fails_inside_the_page_is_exit_4_in_one_line(cli, web_builds, web_lab, tmp_path):
    inv, res = web_lab
    bad = _failing_build(web_builds.fp32, tmp_path / "bad")
    code, out, err = cli("bench", bad, "--device", "chromium", "--inventory", inv, "--results", res)
    assert code == 4, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert lines == [lines[0]] and "OrtRun failed: INVALID_ARGUMENT: Tensor shape is too large" in lines[0]
    assert "during the timed runs" in lines[0] and "Traceback" not in err


def test_a_browser_that_does_not_start_is_exit_4_in_one_line(cli, web_builds, tmp_path):
    inv = tmp_path / "devices.toml"
    inv.write_text('[devices.chromium]\ntransport = "browser"\ntarget = "web-wasm"\nbrowser = "/bin/false"\n')
    code, out, err = cli("bench", web_builds.fp32, "--device", "chromium", "--inventory", inv, "--results",
                         tmp_path / "r")
    assert code == 4
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "chromium did not start" in lines[0] and "Traceback" not in err


@pytest.mark.parametrize("flag", ["--profile", "--end-to-end"])
def test_runner_only_flags_are_refused_before_a_browser_starts(cli, web_builds, web_lab, flag):
    inv, res = web_lab
    code, out, err = cli("bench", web_builds.fp32, "--device", "chromium", "--inventory", inv, "--results", res, flag)
    assert code == 2 and f"{flag} runs the device runner's Python stages" in err
    assert not Path(res).exists() or not list(Path(res).glob("*.json"))
