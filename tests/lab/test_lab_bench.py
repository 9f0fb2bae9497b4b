"""Benches through a real labgrid lab (coordinator, exporter, client): the fleet form over
tags, a place another user holds, and what is left in labgrid afterwards."""
from __future__ import annotations

import json
import time

import pytest

from device.devhelpers import run_cli_subprocess


def _bench(builds, inv, results, *extra):
    return ["bench", builds.onnx, "--inventory", inv, "--results", results, "--runs", "3", "--warmups", "0",
            *extra]


def test_bench_where_board_measures_both_places_and_leaves_nothing(cli, rpi4_lab, builds):
    fleet, lab, inv = rpi4_lab
    code, out, err = cli(*_bench(builds, inv, fleet.results, "--where", "board=rpi4", "--json", "-q"))
    assert code == 0, err + out
    summary = json.loads(out)
    assert {d["device"]: d["status"] for d in summary["devices"]} == {"rpi4-a": "ok", "rpi4-b": "ok"}
    by_dev = fleet.results_by_device()
    assert sorted(by_dev) == ["rpi4-a", "rpi4-b"]
    for name, (r,) in by_dev.items():
        assert r["status"] == "ok" and len(r["samples_ms"]) == 3
        assert r["device"]["lab"] == {"coordinator": lab.address, "place": name, "tags": {"board": "rpi4"}}
        assert r["device"]["remote_dir"].startswith(str(fleet.root / "workdirs" / name))   # own workdir each
        assert r["device"]["port"] == fleet.sshd({"rpi4-a": "dev-a", "rpi4-b": "dev-b"}[name]).port
    assert lab.acquired() == []
    assert "Reservation" not in lab.reservations()
    # the lab as `edgeforge devices` shows it: tags, holder, queue, edgeforge's health
    lab.client("-p", "rpi4-b", "acquire", user="other", check=True)
    code, out, err = cli("devices", "--inventory", inv)
    assert code == 0, err
    row = [ln for ln in out.splitlines() if ln.startswith("│ rpi4-b")][-1]      # the labgrid table
    assert "board=rpi4" in row and "other" in row and " ok " in row, out
    code, out, err = cli("devices", "--inventory", inv, "--json")
    places = {p["name"]: p for p in json.loads(out)["labgrid"]["places"]}
    assert places["rpi4-b"]["acquired"].endswith("/other") and places["rpi4-a"]["acquired"] is None


def test_a_held_place_is_waited_for_then_busy_naming_the_holder(rpi4_lab, builds):
    fleet, lab, inv = rpi4_lab
    lab.client("-p", "rpi4-a", "acquire", user="other", check=True)
    t0 = time.monotonic()
    p = run_cli_subprocess(*_bench(builds, inv, fleet.results, "--device", "rpi4-a", "--wait-timeout", "20"))
    out, err = p.communicate(timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 4, err
    assert took < 30, took
    lines = [ln for ln in err.splitlines() if ln.startswith("error")]
    assert len(lines) == 1 and "rpi4-a" in lines[0] and "other" in lines[0], err
    assert lab.holder("rpi4-a").endswith("/other")          # never kicked
    assert "Reservation" not in lab.reservations()           # ours was cancelled
    assert fleet.result_files() == []


@pytest.mark.slow   # the wait itself is covered by test_a_held_place_is_waited_for_then_busy_naming_the_holder
def test_a_holder_that_releases_during_the_wait_lets_the_bench_run(rpi4_lab, builds):
    fleet, lab, inv = rpi4_lab
    lab.client("-p", "rpi4-a", "acquire", user="other", check=True)
    p = run_cli_subprocess(*_bench(builds, inv, fleet.results, "--device", "rpi4-a", "--wait-timeout", "120"))
    deadline = time.monotonic() + 60
    while "waiting" not in lab.reservations():                # edgeforge is in labgrid's queue
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.3)
    lab.client("-p", "rpi4-a", "release", user="other", check=True)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    (r,) = [json.loads(f.read_text()) for f in fleet.result_files()]
    assert r["status"] == "ok" and r["device"]["lab"]["place"] == "rpi4-a"
    assert lab.acquired() == [] and "Reservation" not in lab.reservations()
