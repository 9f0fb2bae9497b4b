"""Helpers for the ARM tests (imported by conftest.py and the tests)."""
from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

from edgeforge.cache import default_cache_dir

# Read before the root conftest points EDGEFORGE_CACHE at a per-session directory: the rootfs and
# the wheels stay in the user's (or CI's) cache across sessions.
PERSISTENT_CACHE = default_cache_dir()
CPU = "cortex-a72"


def edgeforge(*args) -> tuple[int, str, str]:
    """``edgeforge ARGS`` in this process: (exit code, stdout, stderr)."""
    from edgeforge.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def manifest(build_dir: Path) -> dict:
    return json.loads((build_dir / "manifest.json").read_text())


def one_result(results_dir: Path) -> dict:
    files = sorted(results_dir.glob("*.json"))
    assert len(files) == 1, [f.name for f in files]
    return json.loads(files[0].read_text())


def root_processes(root: Path) -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/root").startswith(str(root)):
                out.append(int(pid))
        except OSError:
            pass
    return out


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, read from /proc/mounts."""
    with open("/proc/mounts") as fh:
        points = [line.split()[1] for line in fh]
    return [p for p in points if p == str(root) or p.startswith(f"{root}/")]
