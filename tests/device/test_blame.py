"""issue 23, blame in the right place: a failure caused by the build (its manifest, its files, a
runner that refuses them on the device) is a build error, exit 2, never retried and never counted
against the device's health; the manifest is checked before anything is sent. Real CLI, real
loopback sshd, build directories copied from a real build."""
from __future__ import annotations

import json
import shutil

import numpy as np

from devhelpers import run_cli_subprocess

HOSTILE = "x'; touch {pwned}"


def _copy(build, tmp_path):
    b = tmp_path / "build"
    shutil.copytree(build, b)
    return b


def _edit(build, fn):
    m = json.loads((build / "manifest.json").read_text())
    fn(m)
    (build / "manifest.json").write_text(json.dumps(m))


def _bench(lab, build, inv, *extra):
    proc = run_cli_subprocess("bench", build, "--device", "local", "--inventory", inv, "--results", lab.results,
                              "--runs", "3", "--warmups", "0", "-q", *extra)
    out, err = proc.communicate(timeout=180)
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert "Traceback" not in out + err and len(errors) <= 1, err
    return proc.returncode, (errors or [""])[0]


def _state(inv):
    p = inv.with_name(inv.stem + ".state.json")
    return p.read_text() if p.exists() else None


def test_hostile_input_name_is_refused_before_connecting(lab, builds, tmp_path):
    """Three benches of a build whose input name is a shell fragment: exit 2 each, naming the
    field, and nothing reached the device (no workdir, no lease, no upload); its health state is
    untouched, and a good build benches right after."""
    pwned = tmp_path / "pwned"
    build = _copy(builds.onnx, tmp_path)
    _edit(build, lambda m: m["inputs"][0].__setitem__("name", HOSTILE.format(pwned=pwned)))
    inv = lab.inventory()
    before = _state(inv)
    for _ in range(3):
        code, line = _bench(lab, build, inv)
        assert code == 2, line
        assert "manifest.json: field inputs.0.name: must be a tensor name" in line, line
    assert not lab.workdir.exists(), "something reached the device"
    assert not pwned.exists() and lab.result_files() == []
    assert _state(inv) == before
    assert _bench(lab, builds.onnx, inv)[0] == 0


def test_a_missing_or_mismatched_reference_file_is_a_build_error(lab, builds, tmp_path):
    inv = lab.inventory()
    build = _copy(builds.onnx, tmp_path)
    (build / "reference" / "device_outputs.npz").unlink()
    code, line = _bench(lab, build, inv)
    assert code == 2 and "reference/device_outputs.npz is missing" in line, line
    build2 = _copy(builds.onnx, tmp_path / "two")
    _edit(build2, lambda m: m["inputs"][0].__setitem__("shape", [-1, 3, 32, 32]))
    code, line = _bench(lab, build2, inv)
    assert code == 2 and "input 'x' is float32[" in line and "the manifest says float32[-1, 3, 32, 32]" in line, line
    assert not lab.workdir.exists() and _state(inv) is None


def test_a_build_the_runner_refuses_on_the_device_is_exit_2_and_not_the_devices_fault(lab, builds, tmp_path):
    """The input is renamed consistently in the manifest and the reference data (so every check
    on the host passes), but the model's input is still `x`: the runner on the device refuses the
    build (error kind "build"). Exit 2 three times over, the device's health is unchanged (never
    marked unhealthy), and it benches a good build right after."""
    build = _copy(builds.onnx, tmp_path)
    ref = build / "reference" / "device_inputs.npz"
    with np.load(ref) as z:
        data = {("y" if k == "x" else k): z[k] for k in z.files}
    np.savez(ref, **data)
    _edit(build, lambda m: m["inputs"][0].__setitem__("name", "y"))
    inv = lab.inventory()
    for _ in range(3):
        code, line = _bench(lab, build, inv)
        assert code == 2, line
        assert "the runner on local refused the build: the manifest's inputs (y) are not the model's (x)" in line, line
        assert "the device is not at fault" in line
    assert lab.workdir.exists()                 # it did reach the device
    assert _state(inv) is None                  # ... and was never charged for it
    assert lab.result_files() == []
    assert not (lab.workdir / ".lease").exists()
    assert _bench(lab, builds.onnx, inv)[0] == 0
    state = json.loads(_state(inv))["devices"]["local"]
    assert state["consecutive_failures"] == 0 and not state["unhealthy"]
