"""SIGINT, SIGTERM and SIGHUP sent to ``edgeforge deploy`` (the real CLI, a subprocess) at an
exact step (``EDGEFORGE_DEPLOY_PAUSE``): the deploy stops, the device has the old or the new
release as current (never half), the lease is released, the smoke runner is gone, the record
says what the device has, exit 130."""
from __future__ import annotations

import json
import signal
import time

import pytest

from edgeforge.device.release.deploy import deploy
from edgeforge.options import BenchOptions

from test_deploy import current_id, history, releases_on_disk, top
from test_deploy import _versions  # noqa: F401  (the session fixture "versions")
from test_deploy_lost import kill_smoke_runners, start_deploy, wait_for

pytestmark = pytest.mark.device


@pytest.fixture(autouse=True)
def _results(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEFORGE_RESULTS", str(tmp_path / "results"))
    return tmp_path / "results"


def smoke_runners(marker: str) -> list[int]:
    import os

    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"smoke" in cmd and any(marker.encode() in c for c in cmd) and any(
                    b"edgeforge_runner-" in c and c.endswith(b".pyz") for c in cmd):
                pids.append(int(entry))
    return pids


# (signal, where it arrives, whether the new release is current afterwards)
CASES = [("SIGINT", "upload", False), ("SIGTERM", "switch", False), ("SIGTERM", "health", True),
         ("SIGHUP", "health-running", True)]


# the default suite keeps SIGTERM at the health check; the other three run under make test-slow
@pytest.mark.parametrize("sig,point,switched", [
    pytest.param(*c, id=f"{c[0]}-{c[1]}", marks=() if c[:2] == ("SIGTERM", "health") else pytest.mark.slow)
    for c in CASES])
def test_signal_stops_the_deploy_and_the_record_says_what_the_device_has(lab, versions, tmp_path, _results, sig,
                                                                         point, switched):
    inv = lab.inventory()
    wd = lab.workdir
    assert deploy(versions["v1"], "local", BenchOptions.of(inventory=str(inv), health=False)).exit_code == 0
    v1, before = current_id(wd), history(wd)
    proc = start_deploy(versions["v2"], inv, pause=point, tmp_path=tmp_path)
    flag = tmp_path / "paused"
    try:
        wait_for(flag, proc)
        proc.send_signal(getattr(signal, sig))
        time.sleep(0.2)                       # the handler runs while the deploy is held
        flag.unlink()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    running = smoke_runners(str(wd))
    kill_smoke_runners(str(wd))
    assert proc.returncode == 130, err
    assert not running, "a smoke runner outlived the interrupted deploy"
    [e] = json.loads(out)["devices"]
    [saved] = [json.loads(p.read_text()) for p in _results.glob("deploy-*.json")]
    assert saved["devices"] == [e]
    actual = current_id(wd)
    assert e["status"] == "interrupted" and e["exit_code"] == 130, e
    assert e["verified"] and e["current"] == actual, e
    assert f"interrupted ({sig})" in err and "Traceback" not in err, err
    assert not (wd / ".lease").exists(), "the lease was not released"
    if switched:
        assert actual == e["release"] and history(wd)[-1]["to"] == actual
        assert len(history(wd)) == len(before) + 1
        assert "health check did not run" in err and "rollback" in err, err
        assert e["health"] is None
    else:
        assert actual == v1 and history(wd) == before
        assert releases_on_disk(wd) == [v1], "the interrupted deploy left its release"
    # the link is whole: current is a release with its release.json
    assert (top(wd) / "current" / "release.json").is_file()
