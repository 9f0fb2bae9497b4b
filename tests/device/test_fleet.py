"""Fleet bench on four real sshd devices: parallel fan-out, failure as a value per device,
device selection by tag, builds matched to devices by target, JSON summary."""
from __future__ import annotations

import json
import os
import time

import pytest


from devhelpers import run_cli_subprocess, runner_processes

pytestmark = pytest.mark.device


def _fleet_args(fleet, *builds, devices="all", runs="3"):
    return ["bench", *builds, "--devices", devices, "--inventory", fleet.inventory, "--results", fleet.results,
            "--runs", runs, "--warmups", "1", "-q"]


def test_fleet_benches_every_build_on_every_matching_device(cli, make_fleet, builds, fp32_build):
    fleet = make_fleet(4)
    code, out, err = cli(*_fleet_args(fleet, builds.onnx, fp32_build))
    assert code == 0, err + out
    by_dev = fleet.results_by_device()
    assert sorted(by_dev) == fleet.names
    fleet_ids = set()
    for name, results in by_dev.items():
        assert sorted(r["artifact"]["precision"] for r in results) == ["fp32", "int8"]
        for r in results:
            assert r["status"] == "ok" and r["device"]["remote_dir"].startswith(str(fleet.workdir(name)))
            fleet_ids.add(r["fleet"]["id"])
            t = r["timing"]
            assert t["started_at"] < t["run_started_at"] < t["run_finished_at"] < t["finished_at"]
            assert r["lease"]["acquired_at"] and r["lease"]["released_at"]
    assert len(fleet_ids) == 1
    assert "4 of 4 device(s) ok" in out
    # the devices are benched side by side: one device's time on the board (its lease) overlaps
    # another's; run one after another, no two spans would
    spans = sorted((r["lease"]["acquired_at"], r["lease"]["released_at"], name)
                   for name, results in by_dev.items() for r in results[:1])
    assert any(a[2] != b[2] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1:]), spans
    # one INT8 verdict per model/target/device, against that device's fp32 run, before the table
    flat = out.replace("\n", " ")
    assert all(f"digits/linux-x86 on {name}: verdict: INT8" in flat for name in fleet.names), out
    assert flat.index("verdict: INT8") < flat.index("4 of 4 device(s) ok")
    assert not (fleet.state_file.exists() and json.loads(fleet.state_file.read_text())["devices"]
                and any(e.get("unhealthy") for e in json.loads(fleet.state_file.read_text())["devices"].values()))
    for name in fleet.names:
        assert not (fleet.workdir(name) / ".lease").exists()          # every lease given back


def test_fleet_selects_by_tag_and_matches_targets(cli, make_fleet, builds):
    fleet = make_fleet(4)
    fleet.write_inventory(**{"dev-d": {"target": "rpi4"}})             # dev-d gets no linux-x86 build
    code, out, err = cli(*_fleet_args(fleet, builds.onnx, devices="rack2"), "--json")
    assert code == 0, err
    summary = json.loads(out)
    status = {d["device"]: d["status"] for d in summary["devices"]}
    assert status == {"dev-c": "ok", "dev-d": "idle"}
    assert sorted(fleet.results_by_device()) == ["dev-c"]
    # a build no selected device can run is a configuration error, before anything runs
    code, _, err = cli(*_fleet_args(fleet, builds.onnx, devices="dev-d"))
    assert code == 2 and "no selected device is a linux-x86" in err
    code, _, err = cli(*_fleet_args(fleet, builds.onnx, devices="rack9"))
    assert code == 2 and "no device named or tagged 'rack9'" in err


def test_one_device_killed_mid_run_the_others_land(make_fleet, builds):
    """dev-c's sshd is killed (listener and sessions, SIGKILL) while its runner runs: the other
    three results land, the summary names dev-c and the cause, exit 4."""
    fleet = make_fleet(4)
    victim = "dev-c"
    fleet.write_inventory(**{victim: {"python": str(fleet.slow_python(30))}})
    proc = run_cli_subprocess(*_fleet_args(fleet, builds.onnx, runs="5"), "--retries", "0")
    try:
        deadline = time.monotonic() + 60
        pids = []
        while time.monotonic() < deadline and not pids:
            pids = runner_processes(str(fleet.workdir(victim)))
            time.sleep(0.05)
        assert pids, "the victim's runner never started"
        killed = fleet.sshd(victim).kill_all()
        assert len(killed) >= 2
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in runner_processes(str(fleet.workdir(victim))):
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass
    assert proc.returncode == 4, out + err
    by_dev = fleet.results_by_device()
    assert sorted(by_dev) == ["dev-a", "dev-b", "dev-d"]
    for [r] in by_dev.values():
        assert r["status"] == "ok" and len(r["samples_ms"]) == 5
    assert "3 of 4 device(s) ok, 1 failed" in out
    failed = [ln for ln in out.splitlines() if ln.startswith("failed:")]
    assert len(failed) == 1 and victim in failed[0] and "lost while running the bench" in failed[0], out
    [line] = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert line.startswith("error: 1 of 4 devices failed: dev-c (connection to") and "lost" in line
