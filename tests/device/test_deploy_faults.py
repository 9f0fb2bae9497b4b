"""deploy under faults and load: sshd killed at each step, a canary whose gate fails, an
application reading ``current`` while it is switched."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from edgeforge.device.release.deploy import deploy, rollback
from edgeforge.options import BenchOptions

from test_deploy import NAME, current_digest, current_id, digest, history, releases_on_disk, top
from test_deploy import _versions  # noqa: F401  (the session fixture "versions")

pytestmark = pytest.mark.device


@pytest.fixture(autouse=True)
def _results(tmp_path, monkeypatch):
    """Deploy records go to a directory of the test's own."""
    monkeypatch.setenv("EDGEFORGE_RESULTS", str(tmp_path / "results"))

def _smoke_runners(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"smoke" in cmd and any(marker.encode() in c for c in cmd):
                pids.append(int(entry))
    return pids


@pytest.mark.slow   # the sshd-killed matrix is covered by test_deploy_lost in the default suite
@pytest.mark.parametrize("step", ["upload", "smoke", "switch"])
def test_sshd_killed_mid_deploy_leaves_current_untouched(own_sshd, versions, tmp_path, step):
    """Kill sshd (listener and sessions) as the deploy of v4 reaches ``step`` (for the smoke
    test: once the runner is running): the deploy fails (exit 4) and v2 is still current."""
    wd = tmp_path / "wd"
    inv = tmp_path / "devices.toml"
    own_sshd.write_inventory(inv, [own_sshd.device(workdir=str(wd))])
    opts = BenchOptions.of(inventory=str(inv), retries=0, health=False)
    for v in ("v1", "v2"):
        assert deploy(versions[v], "local", opts).exit_code == 0
    v2, before = current_id(wd), history(wd)
    killed = []
    trigger = {"upload": lambda s, m: s == "upload",
               "smoke": lambda s, m: s == "smoke" and m == "sha256 checked",
               "switch": lambda s, m: s == "switch"}[step]

    def on_step(dev, s, m):
        if not killed and trigger(s, m):
            killed.extend(own_sshd.kill_all())
            time.sleep(0.2)

    try:
        record = deploy(versions["v4"], "local", opts, on_step=on_step)
    finally:
        for p in _smoke_runners(str(wd)):
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass
    assert killed, f"never reached {step}"
    [e] = record.devices
    assert record.exit_code == 4 and e.status == "failed", e
    assert current_id(wd) == v2 and current_digest(wd) == digest(versions["v2"])
    assert history(wd) == before
    own_sshd.start()
    # the lost deploy's lease is broken as this process's own abandoned one; v2 is still current
    again = deploy(versions["v4"], "local", opts)
    assert again.exit_code == 0, again.devices[0]
    assert history(wd)[-1]["from"] == v2


@pytest.mark.slow
def test_canary_gate_failure_leaves_the_rest_untouched(cli, sshd, versions, tmp_path):
    """Three device entries on one sshd, each its own workdir: v1 everywhere, then v2 with
    --canary 1 and a latency gate nobody meets: the canary is switched back to v1, the other two
    never see v2. Then a gate that holds: all three on v2."""
    names = ["dev-a", "dev-b", "dev-c"]
    wds = {n: tmp_path / n for n in names}
    inv = tmp_path / "devices.toml"
    sshd.write_inventory(inv, [sshd.device(name=n, workdir=str(wds[n]), tags=["lab"]) for n in names])
    code, _, err = cli("deploy", versions["v1"], "--devices", "lab", "--inventory", inv, "-q")
    assert code == 0, err
    v1 = {n: current_id(wds[n]) for n in names}
    code, out, err = cli("deploy", versions["v2"], "--devices", "lab", "--inventory", inv, "-q", "--json",
                         "--canary", "1", "--max-p50-ms", "0.000001", "--runs", "3", "--warmups", "1",
                         "--results", tmp_path / "results")
    assert code == 1, err
    rec = {e["device"]: e for e in json.loads(out)["devices"]}
    assert rec["dev-a"]["role"] == "canary" and rec["dev-a"]["status"] == "gate failed"
    assert rec["dev-a"]["bench_result"] and rec["dev-a"]["gates"][0]["name"] == "max_p50_ms"
    assert current_id(wds["dev-a"]) == v1["dev-a"]
    assert [h["action"] for h in history(wds["dev-a"])] == ["deploy", "deploy", "canary-revert"]
    for n in ("dev-b", "dev-c"):
        assert rec[n]["status"] == "not deployed" and "canary failed" in rec[n]["notes"][0]
        assert current_id(wds[n]) == v1[n] and len(history(wds[n])) == 1
        assert releases_on_disk(wds[n]) == [v1[n]]
    code, out, err = cli("deploy", versions["v2"], "--devices", "lab", "--inventory", inv, "-q", "--json",
                         "--canary", "1", "--max-accuracy-drop", "1", "--runs", "3", "--warmups", "1",
                         "--results", tmp_path / "results")
    assert code == 0, err
    assert {e["device"]: e["status"] for e in json.loads(out)["devices"]} == {n: "deployed" for n in names}
    assert all(current_digest(wds[n]) == digest(versions["v2"]) for n in names)



@pytest.mark.slow
def test_a_canary_speedup_gate_compares_with_the_devices_fp32_runs(cli, sshd, versions, fp32_build, tmp_path):
    """deploy --canary 1 --min-int8-speedup X: the canary runs INT8 only, so its fp32
    counterpart is an earlier fp32 run on the same device in the results directory. With none
    the gate fails saying so (exit 1, nothing switched in); after an fp32 bench it is judged."""
    names = ["dev-a", "dev-b"]
    inv = tmp_path / "devices.toml"
    sshd.write_inventory(inv, [sshd.device(name=n, workdir=str(tmp_path / n), tags=["lab"]) for n in names])
    results = tmp_path / "results"
    gate = ("--devices", "lab", "--inventory", inv, "-q", "--json", "--results", results, "--canary", "1",
            "--min-int8-speedup", "0.01", "--runs", "5", "--warmups", "1")
    code, out, err = cli("deploy", versions["v2"], *gate)
    assert code == 1, err
    rec = {e["device"]: e for e in json.loads(out)["devices"]}
    [g] = rec["dev-a"]["gates"]
    assert rec["dev-a"]["status"] == "gate failed" and g["name"] == "min_int8_speedup", rec
    assert g["measured"] is None and "fp32" in g["message"], g
    assert rec["dev-b"]["status"] == "not deployed" and current_id(tmp_path / "dev-b") is None
    code, _, err = cli("bench", fp32_build, "--device", "dev-a", "--inventory", inv, "--results", results,
                       "--runs", "5", "--warmups", "1", "-q")
    assert code == 0, err
    code, out, err = cli("deploy", versions["v2"], *gate)
    assert code == 0, err + out
    rec = {e["device"]: e for e in json.loads(out)["devices"]}
    [g] = rec["dev-a"]["gates"]
    assert g["passed"] and g["measured"] > 0.01 and "fp32 p50" in g["message"], g
    assert {n: e["status"] for n, e in rec.items()} == {"dev-a": "deployed", "dev-b": "deployed"}


READER = r'''
import hashlib, os, sys, time
path, stop, good = sys.argv[1], sys.argv[2], set(sys.argv[3].split(","))
reads = bad = 0
seen = set()
deadline = time.time() + 600        # never outlive a test that was killed
while not os.path.exists(stop) and time.time() < deadline:
    try:
        with open(path, "rb") as f:
            d = hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        bad += 1
        print("error", e, flush=True)
        continue
    reads += 1
    seen.add(d)
    if d not in good:
        bad += 1
        print("partial", d, flush=True)
print("reads", reads, "bad", bad, "seen", len(seen), flush=True)
'''


@pytest.mark.slow
def test_reader_never_sees_a_missing_or_partial_file(lab, versions):
    """An application opening current/model.onnx in a loop while current is switched 20 times."""
    inv = lab.inventory()
    opts = BenchOptions.of(inventory=str(inv), health=False)
    for v in ("v1", "v2"):
        assert deploy(versions[v], "local", opts).exit_code == 0
    ids = releases_on_disk(lab.workdir)
    stop = lab.root / "stop"
    good = f"{digest(versions['v1'])},{digest(versions['v2'])}"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(top(lab.workdir) / "current" / "model.onnx"),
                               str(stop), good], stdout=subprocess.PIPE, text=True)
    try:
        for i in range(20):
            rec = rollback(NAME, "local", opts.connection, to=ids[i % 2])
            assert rec.exit_code == 0, rec.devices[0]
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=30)
    last = out.strip().splitlines()[-1].split()
    assert last[0] == "reads" and int(last[1]) > 20 and last[3] == "0", out
    assert last[5] == "2", out                      # it saw both releases
    assert len(history(lab.workdir)) == 22
