"""issue 44: the lab is shared. Another user's place whose name has a space or markup is skipped
with one warning naming it, and `devices`, `bench --device` and `bench --where` keep working;
a coordinator that does not answer fails only the lab's devices, with exit 4 and its address:
`bench --devices all` benches the static devices and does not drop the lab silently, and
`--devices board=rpi4` names the coordinator. The real labgrid coordinator and exporter, the
real CLI, real sshd boards."""
from __future__ import annotations

import json

import pytest

from edgeforge.device.link.inventory import render_device_toml

STRANGE = ("other user's board", "<b>x</b>")


def _bench(builds, inv, results, *extra):
    return ["bench", builds.onnx, "--inventory", inv, "--results", results, "--runs", "3", "--warmups", "0", *extra]


def _warnings(err):
    return [ln for ln in err.splitlines() if ln.startswith("warning:")]


def _strange_places(lab):
    for name in STRANGE:
        lab.place(name, "dev-b", board="rpi4")


# make test-slow (56 s on 2 loaded cores: a --where bench over both places); the default suite
# keeps the cheaper test of the same skip below (devices, and a bench on one place)
@pytest.mark.slow
def test_a_place_with_a_space_or_markup_is_skipped_with_a_warning(cli, rpi4_lab, builds):
    fleet, lab, inv = rpi4_lab
    _strange_places(lab)
    code, out, err = cli("devices", "--inventory", inv, "--json")
    assert code == 0, err + out
    warned = _warnings(err)
    assert len(warned) == len(STRANGE), err
    for name in STRANGE:
        assert any(f"labgrid place {name!r} at {lab.address} skipped: its name is not a device name" in w
                   for w in warned), warned
    doc = json.loads(out)
    assert {p["name"]: p["device"] for p in doc["labgrid"]["places"]} == {
        "rpi4-a": True, "rpi4-b": True, STRANGE[0]: False, STRANGE[1]: False}
    code, out, err = cli(*_bench(builds, inv, fleet.results, "--where", "board=rpi4", "--json", "-q"))
    assert code == 0, err + out
    assert {d["device"] for d in json.loads(out)["devices"]} == {"rpi4-a", "rpi4-b"}
    assert lab.acquired() == []


def test_devices_and_bench_device_beside_a_strange_place(cli, rpi4_lab, builds):
    fleet, lab, inv = rpi4_lab
    _strange_places(lab)
    code, out, err = cli("devices", "--inventory", inv)
    assert code == 0 and len(_warnings(err)) == len(STRANGE), err + out
    assert "not a device" in out
    code, out, err = cli(*_bench(builds, inv, fleet.results, "--device", "rpi4-a", "-q"))
    assert code == 0, err + out


def test_a_coordinator_that_does_not_answer_fails_only_the_labs_devices(cli, rpi4_lab, builds):
    fleet, lab, inv = rpi4_lab
    static = fleet.sshds[0].device(name="static", workdir=str(fleet.root / "workdirs" / "static"))
    inv.write_text(inv.read_text() + "\n" + render_device_toml(static))
    lab.stop_coordinator()
    code, out, err = cli(*_bench(builds, inv, fleet.results, "--devices", "all", "--json", "-q"))
    assert code == 4, err + out
    runs = {d["device"]: d for d in json.loads(out)["devices"]}
    assert runs["static"]["status"] == "ok", runs
    assert runs["labgrid"]["status"] == "failed" and lab.address in runs["labgrid"]["error"], runs
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and lab.address in errors[0] and "does not answer" in errors[0], err
    assert sorted(fleet.results_by_device()) == ["static"]
    code, out, err = cli(*_bench(builds, inv, fleet.results, "--devices", "board=rpi4", "-q"))
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 4 and len(errors) == 1, err
    assert f"labgrid coordinator {lab.address} does not answer" in errors[0], errors


def test_deploy_and_rollback_all_with_the_coordinator_down_act_on_the_static_devices(cli, rpi4_lab, builds,
                                                                                       tmp_path):
    """docs/lab.md: a coordinator that does not answer fails only the lab's devices. `deploy
    --devices all` and `rollback --devices all` switch the static device and list the lab as one
    failed entry naming the coordinator's address, exit 4 (rollback used to stop whole)."""
    from device.test_deploy import _doc, make_variant

    fleet, lab, inv = rpi4_lab
    static = fleet.sshds[0].device(name="static", workdir=str(fleet.root / "workdirs" / "static"))
    inv.write_text(inv.read_text() + "\n" + render_device_toml(static))
    v2 = make_variant(builds.onnx, tmp_path / "v2", _doc("digits v2"))
    results = tmp_path / "records"
    lab.stop_coordinator()
    current = fleet.root / "workdirs" / "static" / "deploy" / "digits" / "current"
    for build in (builds.onnx, v2):
        code, out, err = cli("deploy", build, "--devices", "all", "--inventory", inv, "--results", results,
                             "--json", "-q")
        assert code == 4, err + out
        entries = {e["device"]: e for e in json.loads(out)["devices"]}
        assert entries["static"]["status"] == "deployed", entries
        assert entries["labgrid"]["status"] == "failed" and lab.address in entries["labgrid"]["error"], entries
        errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and lab.address in errors[0] and "does not answer" in errors[0], err
    deployed = current.resolve().name
    code, out, err = cli("rollback", "digits", "--devices", "all", "--inventory", inv, "--results", results,
                         "--json", "-q")
    assert code == 4, err + out
    entries = {e["device"]: e for e in json.loads(out)["devices"]}
    assert entries["static"]["status"] == "rolled back", entries
    assert entries["labgrid"]["status"] == "failed" and lab.address in entries["labgrid"]["error"], entries
    assert current.resolve().name != deployed
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and f"labgrid coordinator {lab.address} does not answer" in errors[0], err
    assert sorted(json.loads(p.read_text())["action"] for p in results.glob("*.json")) == [
        "deploy", "deploy", "rollback"]
    code, out, err = cli("rollback", "digits", "--devices", "board=rpi4", "--inventory", inv, "--results", results,
                         "-q")
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 4 and len(errors) == 1 and lab.address in errors[0], err
