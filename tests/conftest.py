"""Shared fixtures: a trained copy of the digits example, an isolated build cache."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["FLAGS_enable_pir_api"] = "0"

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "digits"


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Every test session gets its own build cache unless EDGEFORGE_CACHE is set by the caller."""
    if "EDGEFORGE_CACHE" not in os.environ:
        from edgeforge.toolchain import toolchains_dir

        # the Paddle Lite toolchain stays where it is installed (under the user's cache)
        os.environ.setdefault("EDGEFORGE_TOOLCHAINS", str(toolchains_dir()))
        os.environ["EDGEFORGE_CACHE"] = str(tmp_path_factory.mktemp("edgeforge-cache"))
    yield


@pytest.fixture(scope="session")
def digits_project(tmp_path_factory) -> Path:
    """A private copy of examples/digits with trained weights and data (trained once per session)."""
    root = tmp_path_factory.mktemp("digits") / "digits"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    if not (root / "digits.pdparams").is_file() or not (root / "data" / "eval.npz").is_file():
        subprocess.run([sys.executable, str(root / "train.py"), "--out", str(root)], check=True,
                       capture_output=True, text=True)
    return root
