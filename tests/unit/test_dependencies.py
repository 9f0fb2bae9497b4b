"""Every dependency pyproject.toml declares is installed at a version it allows and imports, in
a fresh interpreter: a library that imports something it does not declare (paddleslim 2.6.0:
``six``, and ``pkg_resources``, which setuptools 82 removed) fails here, not in a build."""
from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
# distribution name -> the module a user of it imports (where the two differ)
IMPORT_NAME = {"paddlepaddle": "paddle", "scikit-learn": "sklearn", "pillow": "PIL",
               "setuptools": "pkg_resources", "opencv-python": "cv2", "pyyaml": "yaml"}


def _declared() -> list[Requirement]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = [Requirement(r) for r in data["project"]["dependencies"]]
    return [r for r in reqs if r.marker is None or r.marker.evaluate()]


def _module(req: Requirement) -> str:
    name = req.name.lower()
    return IMPORT_NAME.get(name, name.replace("-", "_"))


def test_every_declared_dependency_is_installed_at_an_allowed_version():
    wrong = []
    for req in _declared():
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{req}: not installed")
            continue
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            wrong.append(f"{req}: {version} installed")
    assert not wrong, wrong


def test_every_declared_dependency_imports():
    modules = sorted({_module(r) for r in _declared()} | {"paddleslim"})
    code = ("import importlib, sys\nbad = []\n"
            f"for m in {modules!r}:\n"
            "    try:\n        importlib.import_module(m)\n"
            "    except Exception as e:\n        bad.append(f'{m}: {type(e).__name__}: {e}')\n"
            "print('\\n'.join(bad)); sys.exit(1 if bad else 0)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def test_paddleslim_qat_is_reachable():
    """What quantize.qat uses: paddleslim's dygraph QAT, in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", "from paddleslim import QAT; print(QAT.__name__)"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "QAT" in proc.stdout, proc.stderr[-2000:]
