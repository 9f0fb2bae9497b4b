"""labgrid's queue with two edgeforge processes, signals and a coordinator that goes away (slow:
each case waits in a real coordinator's queue)."""
from __future__ import annotations

import json
import signal
import time

import pytest

from device.devhelpers import run_cli_subprocess

pytestmark = pytest.mark.slow


def _bench(builds, inv, results, *extra):
    return ["bench", builds.onnx, "--inventory", inv, "--results", results, "--runs", "3", "--warmups", "0",
            "--device", "rpi4-a", *extra]


def _until(cond, proc, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"not within {timeout}s: {what}"
        if proc is not None:
            assert proc.poll() is None, proc.communicate()
        time.sleep(0.3)


def test_priority_10_runs_before_priority_0(rpi4_lab, builds):
    fleet, lab, inv = rpi4_lab
    lab.client("-p", "rpi4-a", "acquire", user="other", check=True)
    low = run_cli_subprocess(*_bench(builds, inv, fleet.root / "r0", "--priority", "0", "--wait-timeout", "300"))
    _until(lambda: lab.reservations().count("state: waiting") == 1, low, "the first reservation")
    high = run_cli_subprocess(*_bench(builds, inv, fleet.root / "r10", "--priority", "10", "--wait-timeout", "300"))
    _until(lambda: lab.reservations().count("state: waiting") == 2, high, "the second reservation")
    lab.client("-p", "rpi4-a", "release", user="other", check=True)
    for p in (high, low):
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    (r0,) = [json.loads(f.read_text()) for f in (fleet.root / "r0").glob("*.json")]
    (r10,) = [json.loads(f.read_text()) for f in (fleet.root / "r10").glob("*.json")]
    assert r10["timing"]["finished_at"] <= r0["timing"]["run_started_at"], (r10["timing"], r0["timing"])
    assert lab.acquired() == [] and "Reservation" not in lab.reservations()


def test_sigint_while_waiting_and_while_running_releases_the_place(rpi4_lab, builds):
    fleet, lab, inv = rpi4_lab
    lab.client("-p", "rpi4-a", "acquire", user="other", check=True)
    p = run_cli_subprocess(*_bench(builds, inv, fleet.results))
    _until(lambda: "state: waiting" in lab.reservations(), p, "the reservation")
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Reservation" not in lab.reservations() and lab.holder("rpi4-a").endswith("/other")
    lab.client("-p", "rpi4-a", "release", user="other", check=True)
    # now during the run on the board: a device python that sleeps before timing
    slow = fleet.slow_python(60)
    inv = lab.inventory(fleet, {"rpi4-a": "dev-a", "rpi4-b": "dev-b"}, name="slow.toml")
    text = inv.read_text().replace("[labgrid.places.rpi4-a]\n", f'[labgrid.places.rpi4-a]\npython = "{slow}"\n')
    inv.write_text(text)
    p = run_cli_subprocess(*_bench(builds, inv, fleet.results))
    _until(lambda: lab.acquired() == ["rpi4-a"], p, "the place acquired")
    time.sleep(3)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert lab.acquired() == [] and "Reservation" not in lab.reservations(), err


def test_the_coordinator_stopped_mid_wait_is_exit_4_in_one_line(rpi4_lab, builds):
    fleet, lab, inv = rpi4_lab
    lab.client("-p", "rpi4-a", "acquire", user="other", check=True)
    p = run_cli_subprocess(*_bench(builds, inv, fleet.results))
    _until(lambda: "state: waiting" in lab.reservations(), p, "the reservation")
    lab.stop_coordinator()
    _, err = p.communicate(timeout=60)
    assert p.returncode == 4, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error")]
    assert len(lines) == 1 and "does not answer" in lines[0], err


def test_a_holder_killed_with_sigkill_and_release_k(rpi4_lab, builds):
    fleet, lab, inv = rpi4_lab
    slow = fleet.slow_python(30)
    text = inv.read_text().replace("[labgrid.places.rpi4-a]\n", f'[labgrid.places.rpi4-a]\npython = "{slow}"\n')
    inv.write_text(text)
    p = run_cli_subprocess(*_bench(builds, inv, fleet.results))
    _until(lambda: lab.acquired() == ["rpi4-a"], p, "the place acquired")
    p.kill()
    p.communicate(timeout=30)
    assert lab.acquired() == ["rpi4-a"]             # nothing can give it back now
    stale = [ln.split("'")[1] for ln in lab.reservations().splitlines() if ln.startswith("Reservation '")]
    # the documented way back: release -k, and cancel the dead client's reservation
    lab.client("-p", "rpi4-a", "release", "-k", check=True)
    for token in stale:
        lab.client("cancel-reservation", token, check=True)
    assert lab.acquired() == [] and "Reservation" not in lab.reservations()
