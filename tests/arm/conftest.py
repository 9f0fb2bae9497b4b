"""Fixtures for the ARM tests: an emulated aarch64 device (qemu-user, real Debian arm64 userland, its
own sshd) and the digits example built for rpi4 (ONNX) and jetson-orin.

Needs root, qemu-user-static, binfmt-support, debootstrap and the network to the Debian mirror and
the package registry the first time (the rootfs is then cached, ~10 minutes to build). Run with
``make test-arm``; excluded from the default suite.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from armhelpers import CPU, PERSISTENT_CACHE, edgeforge, mounts_under

from edgeforge.device.link.inventory import load_inventory, render_device_toml


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.arm)


@pytest.fixture(scope="session")
def emu(tmp_path_factory):
    """The emulated Pi 4 (target rpi4, cortex-a72), started from the cached rootfs; stopped at the end,
    and the end checked: nothing mounted under it, no process left in it."""
    from edgeforge.device.provision.emulate import Emulator

    e = Emulator(tmp_path_factory.mktemp("emu") / "pi", cpu=CPU, target="rpi4", cache=PERSISTENT_CACHE)
    e.start()
    yield e
    e.stop(purge=True)
    assert e.processes() == []
    assert mounts_under(e.root) == []


@pytest.fixture(scope="session")
def emu_ready(emu):
    """The emulated device after ``devices setup``: (what probe said before, the setup result)."""
    from edgeforge.device.link.check import check_device
    from edgeforge.device.provision.setup import setup_device

    before = check_device(emu.name, inventory=emu.inventory)
    res = setup_device(emu.name, inventory=emu.inventory, cache=PERSISTENT_CACHE)
    return SimpleNamespace(before=before, setup=res, inventory=emu.inventory)


@pytest.fixture(scope="session")
def orin_inventory(emu_ready, emu, tmp_path_factory) -> Path:
    """The same emulated device entered as a jetson-orin (its CPU EP), python from setup."""
    dev = load_inventory(emu.inventory).get(emu.name)
    path = tmp_path_factory.mktemp("orin") / "devices.toml"
    path.write_text(render_device_toml(dev.model_copy(update={"name": "emu-orin", "target": "jetson-orin"})))
    return path


@pytest.fixture(scope="session")
def arm_builds(digits_project, tmp_path_factory):
    """digits: rpi4 ONNX fp32 and INT8, jetson-orin fp32 and INT8, and rpi4 Paddle Lite INT8 (.nb)
    where the Lite toolchain is installed (its one user is marked needs_lite)."""
    from edgeforge.toolchain import find_lite

    out = tmp_path_factory.mktemp("arm-builds")
    dirs = {}
    lite = [("rpi4-lite", "rpi4", [])] if find_lite() is not None else []
    for key, target, extra in (("rpi4-fp32", "rpi4", ["--backend", "onnx", "--precision", "fp32"]),
                               ("rpi4-int8", "rpi4", ["--backend", "onnx"]),
                               ("orin-fp32", "jetson-orin", ["--precision", "fp32"]),
                               ("orin-int8", "jetson-orin", []), *lite):
        code, _, se = edgeforge("build", digits_project, "--target", target, *extra, "--out", out / key, "-q")
        assert code == 0, f"build {key}: {se}"
        dirs[key] = out / key
    return dirs
