"""The install test: build the wheel, install it into a fresh venv (this interpreter's Python,
3.11 in CI), run `edgeforge doctor` and `edgeforge build --target jetson-orin` from it.

Slow (a fresh venv of Paddle and onnxruntime, ~2 min from the local registry): `.ci/run` runs
it with ``pytest -m slow tests/integration/test_install.py``.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import where_installed

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _run(argv, **kw):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)


def test_wheel_installs_and_builds_for_jetson_orin(tmp_path, digits_project):
    wheels = tmp_path / "wheels"
    r = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, REPO], timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = wheels.glob("edgeforge-*.whl")

    venv = tmp_path / "venv"
    r = _run([sys.executable, "-m", "venv", venv], timeout=300)
    assert r.returncode == 0, r.stderr
    py, ef = venv / "bin" / "python", venv / "bin" / "edgeforge"
    r = _run([py, "-m", "pip", "install", "-q", wheel], timeout=1500)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]

    # run from elsewhere, with no source tree and no Lite toolchain in reach
    env, work, pkg, targets = where_installed(py, tmp_path, "80")
    assert pkg.startswith(str(venv)) and targets.startswith(str(venv)), (pkg, targets)

    doc = _run([ef, "doctor", "--target", "jetson-orin"], cwd=work, env=env, timeout=300)
    assert doc.returncode == 0, doc.stdout + doc.stderr
    assert all(len(ln) <= 80 for ln in doc.stdout.splitlines())
    assert doc.stdout.splitlines()[-1] == "ready for target jetson-orin"
    py_line = next(ln for ln in doc.stdout.splitlines() if " python " in ln)
    assert py_line.startswith("ok") and f"{sys.version_info[0]}.{sys.version_info[1]}." in py_line

    out = work / "orin"
    b = _run([ef, "build", digits_project, "--target", "jetson-orin", "--out", out], cwd=work, env=env,
             timeout=900)
    assert b.returncode == 0, b.stdout[-2000:] + b.stderr[-2000:]
    m = json.loads((out / "manifest.json").read_text())
    assert m["backend"] == "onnx" and m["precision"] == "int8" and m["verify"]["status"] in ("passed", "device-only")
    assert m["host"]["python"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")
    assert (out / m["artifact"]["path"]).stat().st_size == m["artifact"]["size_bytes"]
