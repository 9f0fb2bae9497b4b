"""deploy through the real CLI with the device's sshd killed at each step of the switch: what
is printed and recorded must be what the device has (its ``current`` symlink, read here from
the filesystem: the loopback device is this machine).

Each step is hit exactly: ``EDGEFORGE_DEPLOY_PAUSE=POINT:FILE`` makes the host create FILE at
POINT and wait until the test removes it; for a switch whose reply is lost, the device's python
holds the switch script's output until the test has killed sshd.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgeforge.device.release.deploy import deploy
from edgeforge.options import BenchOptions

from devhelpers import _sighup_default
from test_deploy import NAME, current_id, history, releases_on_disk, top
from test_deploy import _versions  # noqa: F401  (the session fixture "versions")

pytestmark = pytest.mark.device

EXE = Path(sys.executable).with_name("edgeforge")


@pytest.fixture(autouse=True)
def _results(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEFORGE_RESULTS", str(tmp_path / "results"))
    return tmp_path / "results"


def wait_for(path: Path, proc, timeout=120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"deploy ended before {path.name}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"never reached {path.name}"
        time.sleep(0.02)


def start_deploy(build, inv, *extra, pause=None, tmp_path):
    env = dict(os.environ, COLUMNS="400")       # the error line unwrapped
    env.pop("EDGEFORGE_DEPLOY_PAUSE", None)
    if pause:
        env["EDGEFORGE_DEPLOY_PAUSE"] = f"{pause}:{tmp_path / 'paused'}"
    return subprocess.Popen([str(EXE), "deploy", str(build), "--device", "local", "--inventory", str(inv), "-q",
                             "--json", "--retries", "1", *map(str, extra)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_sighup_default)       # signalled by test_deploy_signals


def kill_smoke_runners(marker: str) -> None:
    """Smoke runners orphaned by the killed sshd (they end at their deadline anyway)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"smoke" in cmd and any(marker.encode() in c for c in cmd):
                try:
                    os.kill(int(entry), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def switch_reply_held(root: Path, python: str) -> tuple[Path, Path]:
    """A device python that runs the release script's switch and then holds its reply (not
    printed) while MARK exists: the switch is made on the device, its answer not yet sent."""
    mark = root / "switched"
    py = root / "python-hold-switch"
    py.write_text("#!/bin/sh\n"
                  "case \"$*\" in\n"
                  f"  *'{{\"op\": \"switch\"'*) out=$({python} \"$@\"); rc=$?; touch {mark}\n"
                  f"    while [ -e {mark} ]; do sleep 0.05; done; printf '%s\\n' \"$out\"; exit $rc;;\n"
                  "esac\n"
                  f"exec {python} \"$@\"\n")
    py.chmod(0o755)
    return py, mark


# point -> (sshd back, sshd gone): (exit code, status, new release current?, read back).
# With the sshd back, fabric reconnects by itself for the next command: a kill between two
# commands (upload, health) is then no failure at all, and the record says so. The switch
# goes only over the connection the deploy has (refused when it is gone, then read back).
CASES = {
    "upload": ((0, "deployed", True, None), (4, "failed", False, False)),
    "switch": ((4, "failed", False, True), (4, "failed", False, False)),
    "switch-reply": ((4, "switched, health unchecked", True, True), (4, "unknown", True, False)),
    "health": ((0, "deployed", True, None), (4, "switched, health unchecked", True, False)),
    "health-running": ((4, "switched, health unchecked", True, True), (4, "switched, health unchecked", True, False)),
}


def sshd_dead(d, timeout=10.0) -> None:
    deadline = time.monotonic() + timeout
    while d.running():
        assert time.monotonic() < deadline, "sshd did not die"
        time.sleep(0.02)


# The default suite keeps the one that ends 'unknown' (30 s in a 28-min make test); the rest of
# the matrix, 'switched, health unchecked' included (20 s), runs under make test-slow.
DEFAULT_CASES = {("switch-reply", False)}


@pytest.mark.parametrize("point,restart", [
    pytest.param(p, r, id=f"{p}-sshd-{'back' if r else 'gone'}",
                 marks=() if (p, r) in DEFAULT_CASES else pytest.mark.slow)
    for p in CASES for r in (True, False)])
def test_sshd_killed_at_each_step_reports_what_the_device_has(own_sshd, versions, tmp_path, _results, point,
                                                              restart):
    code, status, switched, read_back = CASES[point][0 if restart else 1]
    wd, inv = tmp_path / "wd", tmp_path / "devices.toml"
    own_sshd.write_inventory(inv, [own_sshd.device(workdir=str(wd))])
    assert deploy(versions["v1"], "local", BenchOptions.of(inventory=str(inv), health=False)).exit_code == 0
    v1, before = current_id(wd), history(wd)
    if point == "switch-reply":
        py, mark = switch_reply_held(tmp_path, own_sshd.python)
        own_sshd.write_inventory(inv, [own_sshd.device(workdir=str(wd), python=str(py))])
    flag = mark if point == "switch-reply" else tmp_path / "paused"
    proc = start_deploy(versions["v2"], inv, pause=None if point == "switch-reply" else point, tmp_path=tmp_path)
    try:
        wait_for(flag, proc)
        own_sshd.kill_all()
        sshd_dead(own_sshd)
        if restart:
            own_sshd.start()
        else:
            time.sleep(0.5)     # the host's transport sees the EOF (a dead connection, not a slow one)
        flag.unlink()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_smoke_runners(str(wd))
    assert proc.returncode == code, err
    [e] = json.loads(out)["devices"]
    [saved] = [json.loads(p.read_text()) for p in _results.glob("deploy-*.json")]
    assert saved["devices"] == [e]
    actual = current_id(wd)
    assert actual == (e["release"] if switched else v1)
    assert e["status"] == status and e["read_back"] == read_back, e
    if code:
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    # what is recorded (and printed: --json) is what the device has, or it says unknown
    if status == "unknown":
        assert e["current"] is None and not e["verified"] and "could not be read back" in err, e
    else:
        assert e["verified"] and e["current"] == actual, e
    if status == "switched, health unchecked":
        assert e["health"] is None and "health check could not run" in err and "rollback" in err, err
    if switched:
        assert history(wd)[-1]["to"] == actual and len(history(wd)) == len(before) + 1
    else:
        assert history(wd) == before
        if read_back:
            assert releases_on_disk(wd) == [v1], "the failed deploy's release is left on the device"
    if restart:
        return
    own_sshd.start()
    own_sshd.write_inventory(inv, [own_sshd.device(workdir=str(wd))])     # the plain python again
    # the next command reads the device and says where it differs from that record
    r = subprocess.run([str(EXE), "releases", NAME, "--device", "local", "--inventory", str(inv), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stdout)
    assert st["current"] == actual
    if status == "unknown":
        assert st["last_record"] and f"the device has {actual}" in st["last_record"], st["last_record"]
    else:
        assert st["last_record"] is None
    # and the next deploy sweeps what the lost one left unsealed
    again = deploy(versions["v4"], "local", BenchOptions.of(inventory=str(inv), health=False))
    assert again.exit_code == 0, again.devices[0]
    left = [r for r in releases_on_disk(wd) if not (top(wd) / "releases" / r / "release.json").exists()]
    assert left == []
