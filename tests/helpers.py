"""Helpers for tests (importable: pytest puts tests/ on sys.path)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

def copy_project(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600):
    """Run the real `edgeforge` console script; return CompletedProcess."""
    exe = Path(sys.executable).with_name("edgeforge")
    full_env = dict(os.environ, **(env or {}), COLUMNS="120")
    return subprocess.run([str(exe), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
