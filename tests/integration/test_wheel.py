"""The wheel carries the target profiles: build it from a clean copy of the sources, install it
(no dependencies) into a fresh venv that borrows this venv's third-party packages through a
.pth file, and list the targets from a directory outside the repository.

(tests/integration/test_install.py, marked slow, does the full install with every dependency.)
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from helpers import where_installed

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("edgeforge", "targets", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md")

pytestmark = pytest.mark.timeout(300)


def _run(argv, **kw):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)


def test_wheel_ships_the_targets(tmp_path):
    # a clean copy: an in-tree build would reuse whatever a stale build/ directory holds
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    wheels = tmp_path / "wheels"
    r = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", wheels, src],
             timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (wheel,) = wheels.glob("edgeforge-*.whl")

    venv = tmp_path / "venv"
    r = _run([sys.executable, "-m", "venv", "--without-pip", venv], timeout=120)
    assert r.returncode == 0, r.stderr
    py = venv / "bin" / "python"
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    # third-party packages from this venv (not its editable edgeforge: .pth files there are not run)
    (site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", wheel], timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]

    env, work, pkg, targets = where_installed(py, tmp_path, "200")
    assert pkg.startswith(str(site)) and targets == str(site / "edgeforge" / "targets_data"), (pkg, targets)

    listed = _run([venv / "bin" / "edgeforge", "targets"], cwd=work, env=env, timeout=120)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    names = sorted(p.stem for p in (REPO / "targets").glob("*.toml"))
    assert len(names) == 8                    # web-wasm (issue 49) is the eighth
    shown = [ln.split()[0] for ln in listed.stdout.splitlines() if ln[:1].strip()]   # a row's first word
    assert sorted(n for n in shown if n in names) == names, listed.stdout
