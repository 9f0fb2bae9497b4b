"""contracts.host_can_time: the one rule for where the host's timing may decide (issue 23): only
where the host runs the target's first execution provider on the target's ISA."""
from __future__ import annotations

import pytest

from edgeforge.contracts import host_arch, host_can_time, needs_device
from edgeforge.targets import load_target


@pytest.mark.parametrize("machine, arch", [("x86_64", "x86_64"), ("AMD64", "x86_64"), ("aarch64", "arm64"),
                                           ("arm64", "arm64"), ("armv7l", "armv7")])
def test_host_arch_speaks_the_profiles_words(machine, arch):
    assert host_arch(machine) == arch


def test_linux_x86_onnx_is_timed_on_an_x86_host_only():
    t = load_target("linux-x86")
    assert host_can_time(t, "onnx", machine="x86_64") == (True, "")
    assert needs_device(t, "onnx", machine="x86_64") is None
    ok, why = host_can_time(t, "onnx", machine="aarch64")
    assert not ok and why == "linux-x86 is x86_64 and this host is arm64"


def test_tensorrt_targets_are_never_timed_on_the_host():
    for name in ("jetson-orin", "jetson-nano"):
        for machine in ("x86_64", "aarch64"):        # not even on an arm64 host: a different runtime
            ok, why = host_can_time(load_target(name), "onnx", machine=machine)
            assert not ok and why == f"{name} runs TensorrtExecutionProvider, the host times CPUExecutionProvider"
    line = needs_device(load_target("jetson-orin"), "onnx", machine="x86_64")
    assert line.startswith("the host cannot decide (jetson-orin runs TensorrtExecutionProvider")
    assert "the decision needs a device: edgeforge bench" in line


def test_cpu_provider_on_another_isa_needs_the_device_and_the_same_isa_does_not():
    rpi4 = load_target("rpi4")
    assert host_can_time(rpi4, "onnx", machine="x86_64") == (False, "rpi4 is arm64 and this host is x86_64")
    assert host_can_time(rpi4, "onnx", machine="aarch64") == (True, "")


def test_paddle_lite_is_not_timed_on_the_host():
    assert host_can_time(load_target("rpi4"), "lite") == (False, "the host cannot run rpi4's lite artifact")
    ok, why = host_can_time(load_target("linux-x86"), "lite", machine="x86_64")
    assert not ok and "Paddle Lite" in why
