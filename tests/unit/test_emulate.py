"""The emulated device's pieces that need neither root nor qemu: wheel platforms, the inventory
rewrite, the mirror, the recipe key, the one-line errors, and emulated results in gates/compare."""
from __future__ import annotations

import pytest

from edgeforge.cli import main
from edgeforge.device.provision import emulate, rootfs
from edgeforge.device.provision.setup import image_packages, platform_tags, runtime_packages, set_device_python
from edgeforge.errors import ConfigError
from edgeforge.report.compare import compare
from result_factory import PI4, make_result
from edgeforge.report.gates import evaluate_gates

EMU = {**PI4, "cpu_model": "cortex-a72 (qemu-user on AMD EPYC)", "arch": "aarch64", "emulated": "qemu-user"}


def test_platform_tags_follow_the_device_glibc():
    tags = platform_tags("aarch64", "glibc", "2.36")
    assert tags[0] == "manylinux_2_36_aarch64" and tags[-2:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
    assert platform_tags("arm64", "glibc", "2.31")[0] == "manylinux_2_31_aarch64"
    with pytest.raises(ConfigError, match="not glibc"):
        platform_tags("aarch64", "musl", "1.2")


def test_runtime_packages_pin_the_host_versions_and_explain_lite():
    from importlib.metadata import version

    reqs, notes = runtime_packages("rpi4")
    assert reqs == [f"numpy=={version('numpy')}", f"onnxruntime=={version('onnxruntime')}"]
    assert image_packages() == [f"pillow=={version('pillow')}"]     # bench --end-to-end decodes with it
    assert len(notes) == 1 and "no ARM paddlelite wheel" in notes[0] and "docs/emulated-arm.md" in notes[0]
    reqs, notes = runtime_packages("jetson-orin")
    assert notes == [] and reqs[1].startswith("onnxruntime==")


def test_set_device_python_touches_one_table(tmp_path):
    inv = tmp_path / "devices.toml"
    inv.write_text('# mine\n[devices.a]\nhost = "a"\npython = "python3"  # old\n\n'
                   '[devices.b]\nhost = "b"\n')
    set_device_python(inv, "a", "/w/env/bin/python")
    set_device_python(inv, "b", "/x/env/bin/python")
    assert inv.read_text() == ('# mine\n[devices.a]\nhost = "a"\npython = "/w/env/bin/python"\n\n'
                               '[devices.b]\npython = "/x/env/bin/python"\nhost = "b"\n')
    with pytest.raises(ConfigError, match=r"no \[devices.c\]"):
        set_device_python(inv, "c", "p")


def test_apt_mirror_is_the_one_apt_uses(tmp_path, monkeypatch):
    monkeypatch.delenv("EDGEFORGE_DEBIAN_MIRROR", raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n")
    assert rootfs.apt_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [arch=amd64] http://old.example/debian bookworm main\n")
    assert rootfs.apt_mirror("bookworm", tmp_path) == "http://old.example/debian"
    monkeypatch.setenv("EDGEFORGE_DEBIAN_MIRROR", "http://env.example/debian")
    assert rootfs.apt_mirror("bookworm", tmp_path) == "http://env.example/debian"


def test_the_recipe_names_the_tarball(tmp_path):
    a, b = rootfs.Recipe(), rootfs.Recipe(packages=("python3", "openssh-server", "libgomp1", "python3-pip"))
    assert a.key() != b.key() != rootfs.Recipe(wheels=("numpy==1.26.4",)).key()
    assert a.tarball(tmp_path) == tmp_path / "emulate" / f"rootfs-bookworm-arm64-{a.key()}.tar.zst"


def test_not_root_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(rootfs.os, "geteuid", lambda: 1000)
    assert main(["devices", "emulate", "start", "--dir", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs root" in err and "qemu-user-static" in err


def test_emulate_usage_errors(tmp_path, capsys):
    assert main(["devices", "emulate"]) == 2
    assert "start or stop" in capsys.readouterr().err
    assert main(["devices", "emulate", "start"]) == 2
    assert "--dir" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="unknown --cpu"):
        emulate.Emulator(tmp_path, cpu="pentium")
    assert emulate.Emulator(tmp_path, target="rpi5").cpu == "cortex-a76"


def test_latency_gates_refuse_emulated_results_unless_forced():
    emu = [make_result(precision="int8", fingerprint=EMU, median_ms=12.2, seed=1),
           make_result(precision="fp32", fingerprint=EMU, median_ms=40.0, seed=2)]
    with pytest.raises(ConfigError, match="--max-p50-ms on emulated results.*qemu-user"):
        evaluate_gates(emu, max_p50_ms=100)
    with pytest.raises(ConfigError, match="--min-int8-speedup on emulated"):
        evaluate_gates(emu, min_int8_speedup=1.0)
    assert all(g.passed for g in evaluate_gates(emu, max_p50_ms=100, force=True))
    assert all(g.passed for g in evaluate_gates(emu, max_accuracy_drop=1.0))     # accuracy is real


def test_compare_refuses_an_emulated_run_unless_forced():
    real = make_result(precision="int8", median_ms=3.1, seed=1)
    emu = make_result(precision="int8", fingerprint=EMU, median_ms=12.2, seed=2)
    with pytest.raises(ConfigError, match="B ran under qemu-user .*not performance figures"):
        compare(real, emu)
    out = compare(emu, emu, force=True)
    assert any("emulated timings" in f for f in out.forced_past)


def test_hwcap_flags_read_the_emulated_cpu_from_auxv():
    import struct

    from edgeforge.runner.device_facts import hwcap_flags, int8_cpu_flags

    a76 = struct.pack("<8Q", 16, 1 << 1 | 1 << 9 | 1 << 10 | 1 << 20, 26, 0, 6, 4096, 0, 0)
    assert int8_cpu_flags(hwcap_flags(a76)) == ["asimd", "asimddp", "asimdhp", "fphp"]
    a72 = struct.pack("<4Q", 16, 1 << 1 | 1 << 0, 0, 0)
    assert int8_cpu_flags(hwcap_flags(a72)) == ["asimd"]
    assert hwcap_flags(struct.pack("<2Q", 26, 1 << 13)) == {"i8mm"}


def test_the_stage_two_estimate_is_the_last_measured_one(tmp_path):
    """No build here yet: the figure measured on a bare 2-core machine (768 s, issue 47); after a
    build, that build's own stage two; a broken record falls back to the measured figure."""
    assert rootfs.stage2_estimate(tmp_path) == (768.0, "measured on a bare 2-core machine")
    rootfs._record(tmp_path, {"stage1": 36.2, "stage2": 801.44})
    assert rootfs.stage2_estimate(tmp_path) == (801.4, "the last build here")
    (tmp_path / rootfs.TIMINGS).write_text('{"stage2": "soon"}')
    assert rootfs.stage2_estimate(tmp_path)[0] == 768.0


def test_start_refuses_a_dir_of_the_users(tmp_path):
    """emulate start writes devices.toml, keys and chmod 0700 in --dir: a folder of the user's is
    refused before anything is touched (issue 44: replace only what edgeforge wrote)."""
    import pytest

    from edgeforge.errors import ConfigError

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="did not write"):
        emulate.Emulator(mine).start()
    assert (mine / "notes.txt").read_text() == "keep me" and (mine.stat().st_mode & 0o777) != 0o700
    own = tmp_path / "own"
    own.mkdir()
    (own / "devices.toml").write_text("[devices.x]\nhost = 'h'\n")      # the user's inventory
    with pytest.raises(ConfigError, match="did not write"):
        emulate.Emulator(own).start()
    assert (own / "devices.toml").read_text() == "[devices.x]\nhost = 'h'\n"
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "devices.toml").write_text(emulate.INVENTORY_MARK + ": ...\n")
    emulate.Emulator(ours).check_dir()                                   # a previous start's: fine
    emulate.Emulator(tmp_path / "new").check_dir()
