"""issue 44: signals at any moment. Once Paddle is imported, its C++ handler replaced
edgeforge's SIGTERM handler: SIGTERM during verify exited 143 with Paddle's "FatalError" block,
orphaned a user metric's process and left edgeforge-build-* / edgeforge-native-* temporary
directories. Now SIGTERM and SIGHUP while verify's user metric runs (Paddle loaded in the
process) end the metric's whole process group, remove the temporary directories and exit 130
with one line, as SIGINT does. Real CLI in a subprocess, real Paddle, the real digits model."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import copy_project

METRIC = '''
import os, subprocess, time
from pathlib import Path


def metric(outputs, reference, labels):
    child = subprocess.Popen(["sleep", "311"])
    Path(__file__).with_name("metric.pids").write_text(f"{os.getpid()} {child.pid}")
    time.sleep(300)
    return 1.0
'''


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][:1] != "Z"


def _wait_gone(pids, timeout=15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGHUP, marks=pytest.mark.slow)],
                         ids=["SIGTERM", "SIGHUP"])
def test_a_signal_while_verify_runs_a_user_metric_is_a_clean_130(digits_project, tmp_path, sig):
    proj = copy_project(digits_project, tmp_path / "proj")
    (proj / "score.py").write_text(METRIC)
    with (proj / "edgeforge.toml").open("a") as fh:
        fh.write('\n[task]\nkind = "classification"\nmetric = "score:metric"\n')
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    exe = Path(sys.executable).with_name("edgeforge")
    env = dict(os.environ, TMPDIR=str(tmp), EDGEFORGE_CACHE=str(tmp_path / "cache"))
    proc = subprocess.Popen([str(exe), "build", str(proj), "--target", "linux-x86", "--precision", "fp32",
                             "--out", str(tmp_path / "out")], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pids_file = proj / "metric.pids"
    try:
        deadline = time.monotonic() + 300
        while not pids_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pids_file.exists() and proc.poll() is None, proc.communicate()
        time.sleep(0.3)
        pids = [int(p) for p in pids_file.read_text().split()]
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert errors == [f"error: interrupted ({sig.name})"], err[-3000:]
    assert "FatalError" not in err and "Traceback" not in out + err
    assert _wait_gone(pids) == [], "the metric's processes outlived edgeforge"
    assert sorted(p.name for p in tmp.iterdir()) == []
    assert not (tmp_path / "out").exists()


def _full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is already full: the child's first write to it blocks until we read.
    edgeforge writes nothing to stdout before the build summary, which it prints after the
    build directory is in place, so the build stops there, after its last pass, every time."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        while True:
            os.write(w, b"\n" * 65536)
    except BlockingIOError:
        pass
    os.set_blocking(w, True)
    return r, w


def _drain(fd: int) -> None:
    os.set_blocking(fd, False)
    try:
        while os.read(fd, 1 << 20):
            pass
    except BlockingIOError:
        pass


def _verify_stored(cache: Path) -> bool:
    """The last pass's output is in the build's own cache: the passes are over."""
    for entry in cache.glob("*/*/entry.json"):
        try:
            if json.loads(entry.read_text()).get("pass") == "verify":
                return True
        except (OSError, ValueError):
            pass                              # being written: the next look reads it
    return False


@pytest.mark.parametrize("moment", ["last-pass-stored", pytest.param("summary", marks=pytest.mark.slow)])
def test_sigterm_right_after_the_last_pass_is_a_clean_130(digits_project, tmp_path, moment):
    """SIGTERM after the build's passes: as soon as the last pass (verify) is in the build's cache
    (the manifest and the build directory about to be written, Paddle loaded), or once
    manifest.json is in place and the summary is being printed. stdout is a full pipe, so the
    build can never get past its summary before the signal: the moment is bounded on both sides
    whatever the machine's speed. Exit 130 with one line, no edgeforge-build-* /
    edgeforge-native-* temporary directory left, and the build directory either absent or whole
    (its manifest read back, its artifact's digest matching), never half-written."""
    from edgeforge.cache import sha256_file

    proj = copy_project(digits_project, tmp_path / "proj")
    tmp, out_dir, cache = tmp_path / "tmp", tmp_path / "out", tmp_path / "cache"
    tmp.mkdir()
    exe = Path(sys.executable).with_name("edgeforge")
    env = dict(os.environ, TMPDIR=str(tmp), EDGEFORGE_CACHE=str(cache))
    r, w = _full_pipe()
    try:
        proc = subprocess.Popen([str(exe), "build", str(proj), "--target", "linux-x86", "--precision", "fp32",
                                 "--out", str(out_dir)], env=env, text=True, stdout=w, stderr=subprocess.PIPE)
    finally:
        os.close(w)
    try:
        reached = _verify_stored if moment == "last-pass-stored" else (lambda c: (out_dir / "manifest.json").exists())
        deadline = time.monotonic() + 900
        while not reached(cache) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if moment == "summary":
            time.sleep(0.5)                   # into the summary's write, blocked on the full pipe
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            _drain(r)                         # the summary's bytes may come now: let them through
            time.sleep(0.05)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(r)
    assert proc.returncode == 130, err[-3000:]
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert errors == ["error: interrupted (SIGTERM)"], err[-3000:]
    assert "FatalError" not in err and "Traceback" not in err
    assert sorted(p.name for p in tmp.iterdir()) == []
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(("out.", ".out"))]
    assert leftovers == [], leftovers
    if moment == "summary":
        assert out_dir.exists()
    if out_dir.exists():
        m = json.loads((out_dir / "manifest.json").read_text())
        assert sha256_file(out_dir / m["artifact"]["path"]) == m["artifact"]["sha256"]
