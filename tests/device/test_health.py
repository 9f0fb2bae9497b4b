"""Transient connect errors are retried with backoff; a device that fails repeatedly is marked
unhealthy (devices.state.json beside the inventory), skipped, and cleared by `devices check`."""
from __future__ import annotations

import json
import socket

import pytest

from edgeforge.device.provision.localsshd import free_port
from edgeforge.results.schema import read_result

from devhelpers import run_cli_subprocess

pytestmark = pytest.mark.device


def test_transient_connect_error_is_retried(make_fleet, builds):
    """Nothing but a bare TCP listener is on the device's port at first: it takes the bench's
    first connection and drops it without an SSH banner. Then the real sshd starts on that port;
    the bench's next try (after its backoff) gets through."""
    fleet = make_fleet(1, start=False)
    dev = fleet.sshds[0]
    dev.port = free_port()
    dev._prepare()
    dev.known_hosts.write_text(dev.host_key_line())
    fleet.write_inventory()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", dev.port))
    srv.listen(1)
    srv.settimeout(60)
    proc = run_cli_subprocess("bench", builds.onnx, "--device", "dev-a", "--inventory", fleet.inventory,
                              "--results", fleet.results, "--runs", "3", "--warmups", "1", "-q", "--retries", "4")
    try:
        conn, _ = srv.accept()                       # the bench's first try
        conn.close()
        srv.close()
        dev.start()                                  # the device comes up a moment later
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
        srv.close()
    assert proc.returncode == 0, err
    [r] = [read_result(f) for f in fleet.result_files()]
    assert r.connect["attempts"] >= 2 and r.status == "ok"


def _state(fleet) -> dict:
    return json.loads(fleet.state_file.read_text())["devices"]


def test_failing_device_is_marked_unhealthy_skipped_and_cleared_by_check(cli, make_fleet, builds):
    fleet = make_fleet(2)
    down = fleet.sshd("dev-b")
    down.stop()                                       # dev-b refuses every connection
    args = ["bench", builds.onnx, "--devices", "all", "--inventory", fleet.inventory, "--results", fleet.results,
            "--runs", "2", "--warmups", "0", "-q", "--retries", "1"]
    for i in range(1, 4):
        # dev-a is in the third run only: a healthy device next to a failing one is unaffected
        code, out, err = cli(*[("all" if i == 3 else "dev-b") if a == "all" else a for a in args])
        assert code == 4, err
        assert "failed: dev-b (failed): cannot reach" in out and "connection refused (after 2 tries)" in out
        st = _state(fleet)
        assert st["dev-b"]["consecutive_failures"] == i and st.get("dev-a", {}).get("consecutive_failures", 0) == 0
        assert bool(st["dev-b"].get("unhealthy")) == (i == 3)
    assert "now marked unhealthy after 3 consecutive failed benches" in out
    # skipped next time, with a note; dev-a still benched; a skip alone is not a failure
    code, out, err = cli(*args)
    assert code == 0, err
    assert "skipped: dev-b: marked unhealthy since" in out and "edgeforge devices check dev-b" in out
    assert sorted(fleet.results_by_device()) == ["dev-a"] and len(fleet.results_by_device()["dev-a"]) == 2
    # asked for by name alone: refused, one line, exit 4
    code, _, err = cli("bench", builds.onnx, "--device", "dev-b", "--inventory", fleet.inventory, "-q")
    assert code == 4 and err.startswith("error: device dev-b: skipped: marked unhealthy") and len(err.splitlines()) == 1
    # a check that fails leaves the mark
    code, _, err = cli("devices", "check", "dev-b", "--inventory", fleet.inventory, "-q")
    assert code == 4 and _state(fleet)["dev-b"]["unhealthy"] is True
    code, out, _ = cli("devices", "list", "--inventory", fleet.inventory, "--json")
    assert json.loads(out)["dev-b"]["health"]["unhealthy"] is True
    # the device is back: a passing check clears the mark, and it is benched again
    down.start()
    code, out, err = cli("devices", "check", "dev-b", "--inventory", fleet.inventory, "-q")
    assert code == 0, err
    assert "cleared the unhealthy mark on dev-b" in out
    assert _state(fleet)["dev-b"]["unhealthy"] is False and _state(fleet)["dev-b"]["consecutive_failures"] == 0
    code, out, err = cli(*args)
    assert code == 0, err
    assert sorted(fleet.results_by_device()) == ["dev-a", "dev-b"]


def test_busy_is_not_a_health_failure(cli, make_fleet, builds):
    """A device leased by someone else is reported busy (exit 4) but not counted against its health."""
    import os
    import time

    from edgeforge.device.link.lease import boot_id

    fleet = make_fleet(1)
    lease = fleet.workdir("dev-a") / ".lease"
    lease.mkdir(parents=True)
    (lease / "owner.json").write_text(json.dumps({"token": "x", "host": socket.gethostname(), "boot_id": boot_id(),
                                                  "pid": os.getppid(), "ttl_s": 300, "renewed": time.time()}))
    for _ in range(3):
        code, out, err = cli("bench", builds.onnx, "--devices", "all", "--inventory", fleet.inventory,
                             "--results", fleet.results, "-q")
        assert code == 4 and "failed: dev-a (busy): busy: leased by" in out, out + err
    assert not fleet.state_file.exists() or not _state(fleet).get("dev-a", {}).get("consecutive_failures")
