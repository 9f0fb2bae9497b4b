"""issue 19: Ctrl-C during `edgeforge bench` (a real SIGINT to the real CLI, a real loopback
sshd): the runner on the device is stopped within seconds, the samples measured so far are kept
as an `-incomplete` result, the lease is released, exit 130, one `error:` line."""
from __future__ import annotations

import json
import signal
import time

from devhelpers import run_cli_subprocess, runner_processes
from test_device_failures import _wait_gone


def _wait_for_runner(marker: str, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = runner_processes(marker)
        if pids:
            return pids[0]
        time.sleep(0.1)
    raise AssertionError("the runner never started on the device")


def test_ctrl_c_stops_the_runner_keeps_the_samples_and_exits_130(lab, builds):
    inv = lab.inventory()
    proc = run_cli_subprocess("bench", builds.onnx, "--device", "local", "--inventory", inv,
                              "--results", lab.results, "--runs", "10000000", "--warmups", "1",
                              "--timeout", "900")
    try:
        pid = _wait_for_runner(str(lab.workdir))
        time.sleep(10)                  # load, placement, then timed runs under way
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert took < 8, f"took {took:.1f}s after Ctrl-C"
    assert _wait_gone(pid, timeout=5), "the runner still runs on the device"
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err + out, err
    assert "bench on local interrupted (Ctrl-C) after" in errors[0] and "-incomplete.json" in errors[0], errors[0]
    files = lab.result_files()
    assert len(files) == 1 and files[0].name.endswith("-incomplete.json"), files
    result = json.loads(files[0].read_text())
    assert result["status"] == "incomplete" and "interrupted (Ctrl-C)" in result["error"]
    assert 0 < len(result["samples_ms"]) < 10000000
    assert result["lease"]["released_at"] is not None
    assert not (lab.workdir / ".lease").exists()       # released, not left to expire
