"""issue 44: signals at any moment. Once Paddle is imported, its C++ handler replaced
edgeforge's SIGTERM handler: SIGTERM during verify exited 143 with Paddle's "FatalError" block,
orphaned a user metric's process and left edgeforge-build-* / edgeforge-native-* temporary
directories. Now SIGTERM and SIGHUP while verify's user metric runs (Paddle loaded in the
process) end the metric's whole process group, remove the temporary directories and exit 130
with one line, as SIGINT does. Real CLI in a subprocess, real Paddle, the real digits model."""
from __future__ import annotations

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
