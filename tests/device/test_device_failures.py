"""Device failures: each is one line on stderr naming the device and the cause, exit code 4,
and results already measured are kept."""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from edgeforge.device.provision.localsshd import free_port

from devhelpers import run_cli_subprocess, runner_processes

pytestmark = pytest.mark.device


def _bench(cli, lab, build, inv, *extra):
    return cli("bench", build, "--device", "local", "--inventory", inv, "--results", lab.results,
               "--runs", "5", "--warmups", "1", "-q", *extra)


def _one_error_line(err: str, *needles: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("error: device local: "), line
    for n in needles:
        assert n in line, line
    return line


def _wait_gone(pid: int, timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.1)
    return False


# ---------------------------------------------------------------- host keys

def test_unknown_host_key_is_refused_then_recorded_with_trust(cli, lab, builds):
    kh = lab.root / "empty_known_hosts"
    inv = lab.inventory(known_hosts=str(kh))
    code, _, err = _bench(cli, lab, builds.onnx, inv)
    assert code == 4
    _one_error_line(err, "unknown host key", "ssh-ed25519", "SHA256:", f"[127.0.0.1]:{lab.sshd.port}",
                    "--trust-new-host")
    assert not kh.exists() and not lab.result_files()
    assert not lab.workdir.exists()                     # refused before anything ran on the device
    code, _, err = _bench(cli, lab, builds.onnx, inv, "--trust-new-host")
    assert code == 0, err
    assert kh.read_text().split()[:3] == lab.sshd.host_key_line().split()[:3]
    code, _, err = _bench(cli, lab, builds.onnx, inv)   # recorded: no flag needed any more
    assert code == 0, err


def test_changed_host_key_is_refused_even_with_trust(cli, lab, builds):
    other = lab.root / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, b64 = other.with_suffix(".pub").read_text().split()[:2]
    kh = lab.root / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{lab.sshd.port} {kind} {b64}\n")
    code, _, err = _bench(cli, lab, builds.onnx, lab.inventory(known_hosts=str(kh)), "--trust-new-host")
    assert code == 4
    _one_error_line(err, "host key", "has changed")


# ---------------------------------------------------------------- reach and auth

def test_unreachable_device(cli, lab, builds):
    inv = lab.inventory(port=free_port())            # nothing listens there
    code, _, err = _bench(cli, lab, builds.onnx, inv)
    assert code == 4
    _one_error_line(err, "cannot reach", "connection refused")


def test_silent_port_times_out_at_connect(cli, lab, builds):
    with socket.socket() as srv:                     # accepts TCP, never says SSH-2.0
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        inv = lab.inventory(port=srv.getsockname()[1])
        t0 = time.monotonic()
        code, _, err = _bench(cli, lab, builds.onnx, inv, "--connect-timeout", "1")
        assert time.monotonic() - t0 < 15
    assert code == 4
    _one_error_line(err, "cannot reach")


def test_failed_authentication(cli, lab, builds):
    key = lab.root / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    code, _, err = _bench(cli, lab, builds.onnx, lab.inventory(identity=str(key)))
    assert code == 4
    _one_error_line(err, "authentication failed", str(key))


# ---------------------------------------------------------------- runtimes and the runner

def _python_without_onnxruntime(lab) -> Path:
    """A Python with numpy and nothing else of the venv's site-packages (-S, numpy on PYTHONPATH)."""
    import numpy

    site = Path(numpy.__file__).parents[1]
    only = lab.root / "only-numpy"
    only.mkdir()
    for name in ("numpy", "numpy.libs"):
        if (site / name).exists():
            (only / name).symlink_to(site / name)
    import sys

    return lab.script("python-no-ort", f'#!/bin/sh\nPYTHONPATH={only} exec {sys.executable} -S "$@"\n')


def test_missing_runtime(cli, lab, builds):
    inv = lab.inventory(python=str(_python_without_onnxruntime(lab)))
    code, _, err = _bench(cli, lab, builds.onnx, inv)
    assert code == 4
    _one_error_line(err, "runtime missing", "onnxruntime")
    code, out, err = cli("devices", "check", "local", "--inventory", inv, "-q")
    assert code == 4
    _one_error_line(err, "does not match target linux-x86", "onnxruntime")
    assert "onnxruntime" in out and "no" in out


def test_python_not_found(cli, lab, builds):
    code, _, err = _bench(cli, lab, builds.onnx, lab.inventory(python="/nonexistent/python3"))
    assert code == 4
    _one_error_line(err, "python '/nonexistent/python3' not found")


def test_runner_crash(cli, lab, builds):
    """The runtime segfaults half a second into the bench: a real SIGSEGV in the runner process."""
    import sys

    hook = lab.root / "crashhook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys, threading\n"
        "if 'bench' in sys.argv:\n"
        "    import faulthandler\n"
        "    threading.Timer(0.5, faulthandler._sigsegv).start()\n")
    py = lab.script("python-crash", f'#!/bin/sh\nPYTHONPATH={hook} exec {sys.executable} "$@"\n')
    inv = lab.inventory(python=str(py))
    code, _, err = _bench(cli, lab, builds.onnx, inv, "--runs", "1000000")
    assert code == 4
    _one_error_line(err, "runner crashed (SIGSEGV)")


def test_runner_timeout_kills_the_remote_runner(cli, lab, builds):
    inv = lab.inventory()
    t0 = time.monotonic()
    code, _, err = _bench(cli, lab, builds.onnx, inv, "--runs", "1000000", "--timeout", "3")
    assert time.monotonic() - t0 < 20
    assert code == 4
    _one_error_line(err, "runner timed out after 3s", "--timeout")
    left = runner_processes(str(lab.workdir))
    assert all(_wait_gone(p) for p in left), left


def test_sshd_killed_during_a_run(lab, builds, own_sshd, tmp_path):
    """Kill sshd (listener and sessions) while the runner is timing: exit 4, one line, and the
    result measured before is still there, unchanged."""
    inv = tmp_path / "devices.toml"
    own_sshd.write_inventory(inv, [own_sshd.device(workdir=str(tmp_path / "wd"))])
    results = tmp_path / "results"
    ok = run_cli_subprocess("bench", builds.onnx, "--device", "local", "--inventory", inv, "--results", results,
                            "--runs", "3", "-q")
    assert ok.wait(120) == 0, ok.stderr.read()
    [kept] = results.glob("*.json")
    kept_bytes = kept.read_bytes()

    proc = run_cli_subprocess("bench", builds.onnx, "--device", "local", "--inventory", inv, "--results", results,
                              "--runs", "1000000", "--timeout", "120", "-q")
    try:
        deadline = time.monotonic() + 60
        pids = []
        while time.monotonic() < deadline and not pids:
            pids = runner_processes(str(tmp_path / "wd"))
            time.sleep(0.1)
        assert pids, "the runner never started"
        time.sleep(1.0)                                   # into the timed runs
        assert proc.poll() is None
        killed = own_sshd.kill_all()
        assert len(killed) >= 2                           # the listener and the session
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in runner_processes(str(tmp_path / "wd")):  # the orphaned runner (its deadline would end it)
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass
    assert proc.returncode == 4, err
    _one_error_line(err, "connection to", "lost while running the bench")
    assert sorted(results.glob("*.json")) == [kept] and kept.read_bytes() == kept_bytes


def test_device_of_another_architecture(cli, lab, builds, tmp_path):
    """A build for an arm64 target sent to a device declared as that target but really x86-64."""
    import json
    import shutil

    fake = tmp_path / "digits-rpi4"
    shutil.copytree(builds.onnx, fake)
    m = json.loads((fake / "manifest.json").read_text())
    m["target"] = "rpi4"
    m["target_profile"]["arch"] = "arm64"
    (fake / "manifest.json").write_text(json.dumps(m))
    code, _, err = _bench(cli, lab, fake, lab.inventory(target="rpi4"))
    assert code == 4
    _one_error_line(err, "device is x86_64, target rpi4 is arm64")
