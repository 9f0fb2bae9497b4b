"""The Paddle Lite toolchain: Lite targets build with it, stop cleanly without it, and its
versions are part of the cache key and the manifest. ONNX targets never need it."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_cli

from edgeforge import toolchain

HIDDEN = {"EDGEFORGE_LITE_PYTHON": "none"}


@pytest.fixture(scope="module")
def lite(lite_toolchain):
    """The tests that use the toolchain; skipped before they run where there is none."""
    return lite_toolchain


def _one_error_line(stderr: str) -> str:
    """The one ``error:`` line, last on stderr (progress lines may come before it)."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr
    return errors[0]


def test_rpi4_builds_with_the_toolchain(digits_project, tmp_path, lite):
    out = tmp_path / "rpi4"
    r = run_cli("build", str(digits_project), "--target", "rpi4", "--out", str(out))
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["backend"] == "lite" and (out / "model.nb").stat().st_size > 0
    assert m["toolchain"]["paddlelite"] == lite.paddlelite
    assert m["toolchain"]["lite_python"] == lite.python_version
    assert m["toolchain"]["lite_python"].startswith("3.10.")


def test_lite_x86_float_is_verified_in_the_toolchain(digits_project, tmp_path, lite):
    out = tmp_path / "x86-lite"
    r = run_cli("build", str(digits_project), "--target", "linux-x86", "--backend", "lite", "--out", str(out))
    assert r.returncode == 0, r.stderr
    v = json.loads((out / "manifest.json").read_text())["verify"]
    assert v["status"] == "passed", v
    assert v["runtime"]["name"] == "paddlelite"
    assert v["rel_max_abs_error"] <= 1e-4


def test_lite_target_without_toolchain_is_exit_2_one_line(digits_project, tmp_path):
    r = run_cli("build", str(digits_project), "--target", "rpi4", "--out", str(tmp_path / "o"), env=HIDDEN)
    assert r.returncode == 2, r.stderr
    line = _one_error_line(r.stderr)
    assert "edgeforge toolchain install lite" in line
    assert not (tmp_path / "o").exists()


def test_empty_cache_means_no_managed_toolchain(tmp_path):
    """A fresh EDGEFORGE_CACHE holds no toolchain: only a core that imports paddlelite has one."""
    env = {k: v for k, v in os.environ.items() if k not in ("EDGEFORGE_TOOLCHAINS", "EDGEFORGE_LITE_PYTHON")}
    env["EDGEFORGE_CACHE"] = str(tmp_path / "empty")
    code = ("import importlib.util as u; from edgeforge.toolchain import find_lite; t = find_lite(); "
            "print(t and t.source, u.find_spec('paddlelite') is not None)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    source, in_core = res.stdout.split()
    assert source == ("current" if in_core == "True" else "None")
    r = run_cli("doctor", "--target", "rpi4", env={"EDGEFORGE_CACHE": str(tmp_path / "empty"),
                                                  "EDGEFORGE_TOOLCHAINS": str(tmp_path / "empty" / "tc")})
    assert r.returncode == (0 if in_core == "True" else 2), r.stdout


def test_onnx_target_does_not_need_the_toolchain(digits_project, tmp_path):
    out = tmp_path / "orin"
    r = run_cli("build", str(digits_project), "--target", "jetson-orin", "--out", str(out), env=HIDDEN)
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "manifest.json").read_text())["backend"] == "onnx"


def _wrapper(tmp_path: Path, real: str, body: str) -> Path:
    """A fake interpreter: runs ``body`` for lite_child.py jobs, the real python otherwise."""
    p = tmp_path / "python-wrapper"
    p.write_text(f'#!/bin/sh\ncase "$1" in\n  *lite_child.py) {body} ;;\nesac\nexec {real} "$@"\n')
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def test_converter_crash_in_the_toolchain_is_one_line(digits_project, tmp_path, lite):
    py = _wrapper(tmp_path, lite.python, "kill -SEGV $$")
    r = run_cli("build", str(digits_project), "--target", "linux-x86", "--backend", "lite", "--no-cache",
                "--out", str(tmp_path / "o"), env={"EDGEFORGE_LITE_PYTHON": str(py)})
    assert r.returncode == 3, r.stderr
    line = _one_error_line(r.stderr)
    assert "pass convert.lite: paddle_lite_opt --valid_targets=x86 crashed (SIGSEGV)" in line


def test_toolchain_versions_are_in_the_cache_key(tmp_path, lite, monkeypatch):
    """convert.lite's target facts (part of its cache key) carry the toolchain's versions: an
    interpreter that reports another paddlelite gives another key."""
    from edgeforge.passes.lite import LiteConvertPass

    before = LiteConvertPass().target_facts(None)
    assert before["toolchain"] == {"python": lite.python_version, "paddlelite": lite.paddlelite}
    fake = tmp_path / "fake-version"
    (fake / "paddlelite-2.13rc1.dist-info").mkdir(parents=True)
    (fake / "paddlelite-2.13rc1.dist-info" / "METADATA").write_text("Name: paddlelite\nVersion: 2.13rc1\n")
    monkeypatch.setenv("EDGEFORGE_LITE_PYTHON", str(_wrapper(tmp_path, lite.python, ":")))
    monkeypatch.setenv("PYTHONPATH", str(fake))
    after = LiteConvertPass().target_facts(None)
    assert after["toolchain"] == {"python": lite.python_version, "paddlelite": "2.13rc1"}
    assert {k: v for k, v in after.items() if k != "toolchain"} == {k: v for k, v in before.items() if k != "toolchain"}


def test_toolchain_list_shows_it(lite):
    r = run_cli("toolchain", "list")
    assert r.returncode == 0, r.stderr
    assert f"paddlelite {lite.paddlelite}" in r.stdout and f"Python {lite.python_version}" in r.stdout
    hidden = run_cli("toolchain", "list", env=HIDDEN)
    assert "not installed (edgeforge toolchain install lite)" in hidden.stdout
    assert all(len(ln) <= 80 for ln in hidden.stdout.splitlines())


def test_install_refuses_a_python_that_is_not_3_10(tmp_path):
    r = run_cli("toolchain", "install", "lite", "--python", sys.executable if sys.version_info[:2] != (3, 10)
                else "/bin/false", env={"EDGEFORGE_TOOLCHAINS": str(tmp_path / "tc")})
    assert r.returncode == 2
    _one_error_line(r.stderr)
    assert not (tmp_path / "tc").exists()


@pytest.mark.slow
def test_install_creates_a_working_toolchain(tmp_path):
    """A real install from the local package registry into a private toolchains dir (~25 s)."""
    try:
        base = toolchain.find_python310()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no Python 3.10 on this machine: {exc}")
    root = tmp_path / "tc"
    env = {"EDGEFORGE_TOOLCHAINS": str(root)}
    r = run_cli("toolchain", "install", "lite", "--python", base, env=env, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    man = json.loads((root / "lite" / "toolchain.json").read_text())
    assert man["python"].startswith("3.10.") and man["packages"]["paddlelite"] == "2.13rc0"
    assert man["packages"]["numpy"].startswith("1.")
    py = man["python_executable"]
    ok = subprocess.run([py, "-c", "from paddlelite import lite; import onnxruntime, numpy; lite.Opt()"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    listed = run_cli("toolchain", "list", env={**env, "EDGEFORGE_LITE_PYTHON": ""})
    assert "not installed" in listed.stdout     # EDGEFORGE_LITE_PYTHON="" hides even this one
    listed = run_cli("toolchain", "list", "--json", env=env)
    row = json.loads(listed.stdout)[0]
    assert row["source"] == "managed" and row["path"] == py
    again = run_cli("toolchain", "install", "lite", "--if-missing", env=env)
    assert again.returncode == 0 and "already usable" in again.stdout
