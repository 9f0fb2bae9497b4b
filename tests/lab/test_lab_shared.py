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
