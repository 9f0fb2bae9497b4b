"""issues 19 and 23: Ctrl-C, SIGTERM (`timeout`, a CI cancel, systemd) or SIGHUP during
`edgeforge bench` (a real signal to the real CLI, a real loopback sshd): the runner on the device
is stopped within seconds, the samples measured so far are kept as an `-incomplete` result, the
lease is released (the next bench is not refused as busy), exit 130, one `error:` line naming
the signal."""
from __future__ import annotations

import json
import signal
import time

import pytest

from devhelpers import run_cli_subprocess, runner_processes
from test_device_failures import _wait_gone

LABEL = {signal.SIGINT: "SIGINT, Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


def _wait_for_runner(marker: str, timeout: float = 120, proc=None, command: str = "bench") -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = runner_processes(marker, command)
        if pids:
            return pids[0]
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the CLI ended (exit {proc.returncode}) before the runner started: "
                                 f"{proc.communicate()[1]}")
        time.sleep(0.1)
    raise AssertionError("the runner never started on the device")


def assert_not_busy(lab, build, inv):
    """The lease was released: a short bench right after gets the device (exit 0)."""
    proc = run_cli_subprocess("bench", build, "--device", "local", "--inventory", inv, "--results",
                              lab.root / "after", "--runs", "2", "--warmups", "0", "-q")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGINT, id="SIGINT", marks=pytest.mark.slow),
                                 pytest.param(signal.SIGTERM, id="SIGTERM"),   # the default suite's one
                                 pytest.param(signal.SIGHUP, id="SIGHUP", marks=pytest.mark.slow)])
def test_signal_stops_the_runner_keeps_the_samples_and_exits_130(lab, builds, sig):
    inv = lab.inventory()
    proc = run_cli_subprocess("bench", builds.onnx, "--device", "local", "--inventory", inv,
                              "--results", lab.results, "--runs", "1000000", "--warmups", "1",
                              "--timeout", "900")
    try:
        pid = _wait_for_runner(str(lab.workdir), proc=proc)
        time.sleep(10)                  # load, placement, then timed runs under way
        sent = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert took < 8, f"took {took:.1f}s after {sig.name}"
    assert _wait_gone(pid, timeout=5), "the runner still runs on the device"
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err + out, err
    assert f"bench on local interrupted ({LABEL[sig]}) after" in errors[0], errors[0]
    assert "-incomplete.json" in errors[0], errors[0]
    files = lab.result_files()
    assert len(files) == 1 and files[0].name.endswith("-incomplete.json"), files
    result = json.loads(files[0].read_text())
    assert result["status"] == "incomplete" and f"interrupted ({LABEL[sig]})" in result["error"]
    assert 0 < len(result["samples_ms"]) < 1000000
    assert result["lease"]["released_at"] is not None
    assert not (lab.workdir / ".lease").exists()       # released, not left to expire
    assert not runner_processes(str(lab.workdir))
    assert_not_busy(lab, builds.onnx, inv)
