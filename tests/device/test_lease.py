"""The device lease: two real `edgeforge bench` processes never overlap on one device; without
--wait the second reports the device busy, with --wait it waits; stale leases expire."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from datetime import datetime

import pytest

from edgeforge.device.link.lease import boot_id
from edgeforge.device.provision.localsshd import children_of
from result_factory import read_result_doc

from devhelpers import run_cli_subprocess

pytestmark = pytest.mark.device


def _t(s: str) -> datetime:
    return datetime.fromisoformat(s)


def _wait_for(path, timeout=300.0, proc=None):
    """True once ``path`` exists; False at the deadline or when ``proc`` ended first. Generous:
    on a loaded 2-core machine the first bench's interpreter start alone can take a minute."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        if proc is not None and proc.poll() is not None:
            return path.exists()
        time.sleep(0.02)
    return False


def _assert_disjoint(results):
    """Lease intervals (device clock) and runner intervals of one device's results never overlap."""
    rs = sorted(results, key=lambda r: _t(r["lease"]["acquired_at"]))
    for a, b in zip(rs, rs[1:]):
        assert _t(a["lease"]["released_at"]) <= _t(b["lease"]["acquired_at"]), (a["lease"], b["lease"])
        assert _t(a["timing"]["run_finished_at"]) < _t(b["timing"]["run_started_at"])
    for r in rs:
        assert _t(r["lease"]["acquired_at"]) <= _t(r["timing"]["run_started_at"]) \
            < _t(r["timing"]["run_finished_at"]) <= _t(r["lease"]["released_at"])
    return rs


def test_second_bench_is_busy_without_wait_and_waits_with_it(make_fleet, builds):
    fleet = make_fleet(1)
    gate = fleet.root / "let-go"        # the first bench holds the device until this file exists
    fleet.write_inventory(**{"dev-a": {"python": str(fleet.slow_python(240, until=gate))}})
    args = ["bench", builds.onnx, "--device", "dev-a", "--inventory", fleet.inventory, "--results", fleet.results,
            "--runs", "3", "--warmups", "1", "-q"]
    first = run_cli_subprocess(*args)
    waiter = None
    try:
        assert _wait_for(fleet.workdir("dev-a") / ".lease" / "owner.json", proc=first), \
            f"the first bench never took the lease (exit {first.poll()}): {first.stderr.read() if first.poll() is not None else ''}"
        busy = subprocess.run([str(a) for a in [sys.executable, "-m", "edgeforge.cli", *args]],
                              capture_output=True, text=True, timeout=240)
        waiter = run_cli_subprocess(*args, "--wait", "300")
        # let go only once the waiter holds its own connection to the device (it is then at the
        # lease, polling), plus a margin: deterministic however loaded the machine is
        sshd = fleet.sshd("dev-a")
        deadline = time.monotonic() + 240
        while len(children_of(sshd.pid)) < 2 and waiter.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)
        gate.touch()
        assert first.wait(240) == 0, first.stderr.read()
        w_out, w_err = waiter.communicate(timeout=240)
    finally:
        for p in (first, waiter):
            if p is not None and p.poll() is None:
                p.kill()
    assert busy.returncode == 4, busy.stderr
    lines = [ln for ln in busy.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, busy.stderr
    assert lines[0].startswith("error: device dev-a: busy: leased by ")
    assert f"pid {first.pid}" in lines[0] and "--wait" in lines[0]
    assert waiter.returncode == 0, w_err
    results = [read_result_doc(f) for f in fleet.result_files()]
    assert len(results) == 2                       # the busy one wrote nothing
    a, b = _assert_disjoint(results)
    # the waiter waited at least the 1.5 s the test held the device after it connected; the first
    # took a free lease (its waited_s is one lease-script round trip, 0.5 s on a loaded host)
    assert b["lease"]["waited_s"] > a["lease"]["waited_s"] + 1.0, (a["lease"], b["lease"])
    assert not (fleet.workdir("dev-a") / ".lease").exists()


# make test-slow (15 s in a 28-min make test): the default suite keeps the same lease between
# two benches on one device (test_second_bench_is_busy_without_wait_and_waits_with_it)
@pytest.mark.slow
def test_two_fleet_benches_never_overlap_on_any_device(make_fleet, builds):
    fleet = make_fleet(2)
    slow = str(fleet.slow_python(0.8))
    fleet.write_inventory(**{n: {"python": slow} for n in fleet.names})
    args = ["bench", builds.onnx, "--devices", "all", "--inventory", fleet.inventory, "--results", fleet.results,
            "--runs", "3", "--warmups", "1", "-q", "--wait", "120"]
    procs = [run_cli_subprocess(*args) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    by_dev = fleet.results_by_device()
    assert sorted(by_dev) == fleet.names
    waited = 0.0
    for results in by_dev.values():
        assert len(results) == 2 and len({r["fleet"]["id"] for r in results}) == 2
        _, second = _assert_disjoint(results)
        waited += second["lease"]["waited_s"]
    assert waited > 0                               # they did contend


def _write_lease(workdir, **owner):
    d = workdir / ".lease"
    d.mkdir(parents=True)
    (d / "owner.json").write_text(json.dumps(owner))
    return d


def _bench(cli, lab, inv):
    return cli("bench", lab.build, "--device", "local", "--inventory", inv, "--results", lab.results,
               "--runs", "3", "--warmups", "1", "-q")


def test_stale_leases_expire(cli, lab, builds):
    lab.build = builds.onnx
    inv = lab.inventory()
    now = time.time()
    # a crashed run on another machine: not renewed for an hour, its TTL was 5 minutes
    _write_lease(lab.workdir, token="t-old", host="ci-runner-7", boot_id="elsewhere", pid=4242, user="ci",
                 what="edgeforge bench digits@abc", ttl_s=300, acquired=now - 3600, renewed=now - 3600)
    code, _, err = _bench(cli, lab, inv)
    assert code == 0, err
    [r] = [read_result_doc(f) for f in lab.result_files()]
    assert r["lease"]["broke"]["holder"]["host"] == "ci-runner-7"
    assert "over its TTL of 300s" in r["lease"]["broke"]["reason"]
    # a crashed run on this machine: fresh timestamp, but its process is gone
    dead = subprocess.Popen(["true"])
    dead.wait()
    _write_lease(lab.workdir, token="t-dead", host=socket.gethostname(), boot_id=boot_id(), pid=dead.pid,
                 user="me", ttl_s=300, acquired=time.time(), renewed=time.time())
    code, _, err = _bench(cli, lab, inv)
    assert code == 0, err
    newest = max((read_result_doc(f) for f in lab.result_files()), key=lambda r: r["lease"]["acquired_at"])
    assert newest["lease"]["broke"]["holder"]["token"] == "t-dead"
    assert f"pid {dead.pid} on this machine) is gone" in newest["lease"]["broke"]["reason"]
    assert not (lab.workdir / ".lease").exists()


def test_live_leases_are_respected(cli, lab, builds):
    lab.build = builds.onnx
    inv = lab.inventory()
    owner = subprocess.Popen(["sleep", "60"])
    runner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "edgeforge_runner.py", "bench"])
    try:
        # a live holder on this machine
        d = _write_lease(lab.workdir, token="t-live", host=socket.gethostname(), boot_id=boot_id(), pid=owner.pid,
                         user="me", what="edgeforge bench x", ttl_s=300, acquired=time.time(), renewed=time.time())
        code, _, err = _bench(cli, lab, inv)
        assert code == 4 and len(err.strip().splitlines()) == 1, err
        assert err.startswith("error: device local: busy: leased by ") and f"pid {owner.pid}" in err
        # past its TTL, from another machine, but its runner still runs on the device: not broken
        (d / "owner.json").write_text(json.dumps({"token": "t-old", "host": "elsewhere", "pid": 1, "ttl_s": 10,
                                                  "acquired": time.time() - 600, "renewed": time.time() - 600}))
        (d / "runner.json").write_text(json.dumps({"pid": runner.pid, "token": "t-old"}))
        code, _, err = _bench(cli, lab, inv)
        assert code == 4 and f"runner pid {runner.pid} on the device" in err, err
        runner.kill()
        runner.wait()
        code, _, err = _bench(cli, lab, inv)          # the runner ended: now it is stale
        assert code == 0, err
    finally:
        for p in (owner, runner):
            p.kill()
            p.wait()
    assert len(lab.result_files()) == 1
