"""edgeforge doctor: one line per item within 80 columns, the fix on every missing line, and
exit 0/2 by what the --target needs."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import run_cli

from edgeforge import doctor
from edgeforge.doctor import Item

AVX2_ONLY = "processor : 0\nflags : fpu sse2 avx avx2 fma\n"
VNNI = "flags : avx2 avx512f avx512_vnni\n"
ARM = "Features : fp asimd asimddp\n"


@pytest.mark.parametrize(("cpuinfo", "expect"), [
    (AVX2_ONLY, "AVX2 yes, VNNI no, AVX-512 no: INT8 at best ~2x fp32"),
    (VNNI, "AVX2 yes, VNNI yes, AVX-512 yes: fast INT8 (VNNI)"),
    (ARM, "AVX2 no, VNNI no, AVX-512 no: INT8 slow here"),
    ("", "AVX2 no, VNNI no, AVX-512 no: INT8 slow here"),
])
def test_cpu_flags(cpuinfo, expect):
    assert doctor.check_cpu(cpuinfo).detail == expect
    assert doctor.check_cpu(cpuinfo).line(True).startswith("info    cpu")


def test_avx_vnni_counts_as_vnni():
    assert "VNNI yes" in doctor.check_cpu("flags : avx2 avx_vnni\n").detail


def test_binfmt_reads_the_entry(tmp_path):
    assert doctor.check_binfmt(tmp_path).ok is False
    (tmp_path / "qemu-aarch64").write_text("disabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64\n")
    assert doctor.check_binfmt(tmp_path).ok is False
    (tmp_path / "qemu-aarch64").write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64\n")
    assert doctor.check_binfmt(tmp_path).ok is True


def test_a_missing_line_carries_the_fix_and_fits_80_columns():
    it = Item("qemu", False, "qemu-aarch64-static for the emulated aarch64 device was not found",
              "apt-get install -y qemu-user-static binfmt-support")
    line = it.line(needed=False)
    assert line.startswith("missing qemu") and line.endswith("apt-get install -y qemu-user-static binfmt-support")
    assert len(line) <= 80
    assert it.line(needed=True).startswith("MISSING ")
    assert Item("x", True, "y" * 200).line(True).endswith("...") and len(Item("x", True, "y" * 200).line(True)) == 80


def test_needs_follow_the_target_backend():
    assert "lite" in doctor.needed_for("rpi4") and "onnxruntime" not in doctor.needed_for("rpi4")
    assert {"paddle2onnx", "onnxruntime"} <= doctor.needed_for("jetson-orin")
    assert "lite" not in doctor.needed_for("jetson-orin") and "lite" not in doctor.needed_for(None)
    assert {"python", "paddle", "numpy"} <= doctor.needed_for("android-arm64")


def test_render_exit_status():
    items = [Item("python", True, "3.11"), Item("lite", False, "not installed", "edgeforge toolchain install lite"),
             Item("chromium", False, "not found", "apt-get install -y chromium")]
    lines, ready = doctor.render(items, {"python", "lite"}, "rpi4")
    assert not ready and lines[-1] == "not ready for target rpi4: missing lite"
    lines, ready = doctor.render(items, {"python"}, "jetson-orin")
    assert ready and lines[-1] == "ready for target jetson-orin"    # chromium is optional


def _parse(stdout: str) -> dict[str, str]:
    out = {}
    for ln in stdout.splitlines():
        if ln.startswith(("ready", "not ready")):
            continue
        status, name = ln.split()[:2]
        out[name] = status
    return out


def test_cli_without_lite_toolchain():
    r = run_cli("doctor", "--target", "rpi4", env={"EDGEFORGE_LITE_PYTHON": "none"})
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert all(len(ln) <= 80 for ln in lines)
    status = _parse(r.stdout)
    assert set(status) == {"python", "paddle", "lite", "paddle2onnx", "onnxruntime", "numpy", "sshd",
                           "chromium", "web", "qemu", "binfmt", "cpu"}
    assert status["lite"] == "MISSING"
    assert next(ln for ln in lines if " lite " in ln).endswith("edgeforge toolchain install lite")
    # the summary is the one error line (exit 2 comes from the error map, like every verb's)
    assert r.stderr.strip() == "error: not ready for target rpi4: missing lite; the fixes are listed above"
    # the same machine is ready for an ONNX target
    r = run_cli("doctor", "--target", "jetson-orin", env={"EDGEFORGE_LITE_PYTHON": "none"})
    assert r.returncode == 0, r.stdout
    assert _parse(r.stdout)["lite"] == "missing"


def test_cli_sshd_line_follows_edgeforge_sshd(tmp_path):
    r = run_cli("doctor", env={"EDGEFORGE_SSHD": str(tmp_path / "no-sshd")})
    line = next(ln for ln in r.stdout.splitlines() if " sshd " in ln)
    assert line.startswith("missing sshd") and line.endswith("apt-get install -y openssh-server")
    fake = tmp_path / "sshd"
    fake.write_text("")
    r = run_cli("doctor", env={"EDGEFORGE_SSHD": str(fake)})
    assert next(ln for ln in r.stdout.splitlines() if " sshd " in ln).startswith("ok      sshd")


def test_cli_unknown_target_is_usage_error():
    r = run_cli("doctor", "--target", "rpi9")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="no /proc/cpuinfo")
def test_cpu_line_matches_this_host():
    # another reader than the code's: grep for the whole word in the kernel's own list
    def has(*words):
        return any(subprocess.run(["grep", "-qw", w, "/proc/cpuinfo"]).returncode == 0 for w in words)

    detail = doctor.check_cpu().detail
    assert ("AVX2 yes" in detail) == has("avx2"), detail
    assert ("VNNI yes" in detail) == has("avx512_vnni", "avx_vnni"), detail
    assert ("AVX-512 yes" in detail) == has("avx512f"), detail
