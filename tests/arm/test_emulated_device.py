"""The emulated aarch64 device end to end: start/stop, setup from a rootfs without onnxruntime, the
digits ONNX artifacts benched on aarch64 code, emulated results labelled and refused as timings."""
from __future__ import annotations

import json
from importlib.metadata import version

import pytest
from armhelpers import CPU, PERSISTENT_CACHE, edgeforge, manifest, mounts_under, one_result, root_processes

from edgeforge.targets import load_target

ORT = version("onnxruntime")        # setup installs the host's version on the device


def test_second_start_unpacks_the_cached_rootfs_and_stop_leaves_nothing(emu, tmp_path):
    from edgeforge.device.provision.emulate import Emulator
    from edgeforge.device.link.inventory import load_inventory
    from edgeforge.device.link.transport import SSHTransport

    e = Emulator(tmp_path / "pi5", cpu="cortex-a76", target="rpi5", cache=PERSISTENT_CACHE)
    try:
        state = e.start()
        assert "build_stage2" not in state.timings          # `emu` built it (or found it in the cache)
        assert {f"{e.rootfs}/proc", f"{e.rootfs}/sys", f"{e.rootfs}/dev"} <= set(mounts_under(e.rootfs))
        dev = load_inventory(e.inventory).get("emu-arm64")
        assert (dev.target, dev.port, dev.user) == ("rpi5", state.port, "root")
        with SSHTransport(dev, connect_timeout=60) as tr:
            r = tr.run(["sh", "-c", "uname -m; echo $QEMU_CPU $EDGEFORGE_EMULATED"], timeout=120)
        assert r.exit_code == 0 and r.stdout.split() == ["aarch64", "cortex-a76", "qemu-user"]
        assert root_processes(e.rootfs)
    finally:
        code, out, err = edgeforge("devices", "emulate", "stop", "--dir", e.root, "--purge")
    assert code == 0, err
    assert "mount(s) undone" in out
    assert mounts_under(e.root) == []
    assert root_processes(e.root) == []
    assert not e.rootfs.exists()


def test_setup_installs_onnxruntime_from_the_host(emu_ready, emu):
    before = {c["check"]: c for c in emu_ready.before["checks"]}
    assert before["architecture"]["ok"] and "aarch64" in before["architecture"]["detail"]
    assert not before["numpy"]["ok"]                       # the cached rootfs has no runtime
    assert emu_ready.before["runtimes"]["onnxruntime"]["present"] is False
    res = emu_ready.setup
    assert res.platform[0] == "manylinux_2_36_aarch64" and res.python_version.startswith("3.11")
    names = {w["name"].split("-")[0] for w in res.wheels}
    assert {"numpy", "onnxruntime"} <= names
    assert res.python == "/root/edgeforge/env/bin/python" and res.inventory_updated
    assert any("no ARM paddlelite wheel" in n and "docs/emulated-arm.md" in n for n in res.notes)
    assert emu.path("/root/edgeforge/env/site-packages/onnxruntime/capi").is_dir()

    code, out, err = edgeforge("devices", "check", emu.name, "--inventory", emu_ready.inventory, "--json", "-q")
    report = json.loads(out)
    assert report["runtimes"]["onnxruntime"]["present"] and report["runtimes"]["onnxruntime"]["version"] == ORT
    assert report["fingerprint"]["emulated"] == "qemu-user"
    assert report["fingerprint"]["cpu_model"].startswith(f"{CPU} (qemu-user")
    # rpi4's default backend is Paddle Lite, which no registry wheel provides for ARM: check fails
    # cleanly (exit 4, one line) and says what to do
    assert code == 4
    [line] = err.strip().splitlines()
    assert line.startswith("error: device emu-arm64: does not match target rpi4")
    assert "paddlelite" in line and "benchmark_bin" in line and "docs/emulated-arm.md" in line

    again = __import__("edgeforge.device.provision.setup", fromlist=["setup_device"]).setup_device(
        emu.name, inventory=emu_ready.inventory, cache=PERSISTENT_CACHE)
    assert not any(w["uploaded"] for w in again.wheels)    # by digest: nothing sent twice
    assert again.reused and again.python == res.python and not again.inventory_updated


BENCHES = [("rpi4-fp32", "emu"), ("rpi4-int8", "emu"), ("orin-fp32", "orin"), ("orin-int8", "orin")]


@pytest.fixture(scope="module")
def emulated_results(arm_builds, emu_ready, orin_inventory, tmp_path_factory):
    """Each ONNX artifact benched once on the emulated device: {key: result}."""
    out = {}
    for key, inv in BENCHES:
        results = tmp_path_factory.mktemp(f"results-{key}")
        inventory, name = (emu_ready.inventory, "emu-arm64") if inv == "emu" else (orin_inventory, "emu-orin")
        code, _, se = edgeforge("bench", arm_builds[key], "--device", name, "--inventory", inventory,
                                 "--runs", 20, "--warmups", 3, "--results", results, "-q")
        assert code == 0, f"{key}: {se}"
        out[key] = one_result(results)
        out[key]["_path"] = str(next(results.glob("*.json")))
    return out


@pytest.mark.parametrize("key", [k for k, _ in BENCHES])
def test_onnx_artifact_runs_on_aarch64_and_is_marked_emulated(emulated_results, arm_builds, key):
    r = emulated_results[key]
    fp = r["device"]["fingerprint"]
    assert fp["arch"] == "aarch64" and fp["emulated"] == "qemu-user"
    assert fp["cpu_model"].startswith(f"{CPU} (qemu-user on ")
    assert fp["cpu_flags"] == ["asimd"]                    # the Pi 4's A72: no dot product, from auxv
    assert r["runtime"]["name"] == "onnxruntime" and r["runtime"]["version"] == ORT
    assert len(r["samples_ms"]) == 20
    m = manifest(arm_builds[key])
    d, host = r["drift"], r["build"]["host_verify"]
    if m["precision"] == "fp32":
        # aarch64 float kernels agree with the x86 host's verify to 1e-5
        assert d["max_abs_error"] <= 1e-5 and host["max_abs_error"] <= 1e-5
        assert abs(d["max_abs_error"] - host["max_abs_error"]) <= 1e-5
        assert d["top1_agreement"] == 1.0
    else:
        budget = load_target(m["target"]).quantization.max_accuracy_drop
        assert d["accuracy_drop"] <= budget, (d["accuracy_drop"], budget)
        assert d["cosine"] > 0.99
        assert abs(d["accuracy"] - host["accuracy"]) <= 1.0     # aarch64 INT8 vs x86 INT8: points


def test_latency_gates_and_compare_refuse_emulated_timings(emulated_results):
    fp32, int8 = emulated_results["rpi4-fp32"]["_path"], emulated_results["rpi4-int8"]["_path"]
    code, _, err = edgeforge("gate", fp32, int8, "--max-p50-ms", 1e6)
    assert code == 2 and "emulated" in err and "--force" in err
    code, _, err = edgeforge("gate", int8, "--min-int8-speedup", 0.001)
    assert code == 2 and "emulated" in err
    assert edgeforge("gate", fp32, int8, "--max-p50-ms", 1e6, "--force")[0] == 0
    # accuracy is real on this device: its gate holds as usual
    assert edgeforge("gate", int8, "--max-accuracy-drop", 1)[0] == 0
    code, _, err = edgeforge("compare", fp32, int8)
    assert code == 2 and "emulated timings are not performance figures" in err
    code, _, err = edgeforge("compare", fp32, int8, "--force")
    assert code == 0, err


def test_report_labels_emulated_runs(emulated_results, tmp_path):
    paths = [emulated_results[k]["_path"] for k in ("rpi4-fp32", "rpi4-int8")]
    code, _, err = edgeforge("report", *paths, "--out", tmp_path / "report")
    assert code == 0, err
    md = (tmp_path / "report" / "report.md").read_text()
    assert "emulated, qemu-user: timings are not figures" in md
    assert "emulated timings" in md                      # the INT8 pair is not compared


@pytest.mark.needs_lite
def test_lite_nb_on_the_emulated_device_fails_cleanly(arm_builds, emu_ready, tmp_path):
    assert manifest(arm_builds["rpi4-lite"])["backend"] == "lite"
    code, _, err = edgeforge("bench", arm_builds["rpi4-lite"], "--device", "emu-arm64",
                             "--inventory", emu_ready.inventory, "--results", tmp_path, "-q")
    assert code == 4
    [line] = [x for x in err.strip().splitlines() if x.startswith("error:")]
    assert "runtime missing: paddlelite" in line and "benchmark_bin" in line and "docs/emulated-arm.md" in line
