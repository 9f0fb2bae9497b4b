"""Managed toolchains: Paddle Lite in its own Python 3.10 environment.

``paddlelite`` 2.13rc0 publishes x86-64 wheels only up to cp310, while the core (Paddle,
paddle2onnx, onnxruntime) runs on 3.10-3.12. So Paddle Lite lives in a side virtual
environment under the edgeforge cache (``<cache>/toolchains/lite``), created by
``edgeforge toolchain install lite``. edgeforge runs ``paddle_lite_opt`` and the Lite x86 runtime
in that interpreter (edgeforge/lite_child.py, a script with no edgeforge import). The
environment also holds onnxruntime, so the local loopback device can run every build the demo
benches with one ``python``.

Which interpreter runs Paddle Lite, first match wins:

1. ``EDGEFORGE_LITE_PYTHON``: a path; empty or ``none`` hides every Lite toolchain;
2. the managed environment (its ``toolchain.json`` is written last, so a half-finished install
   does not count);
3. this interpreter, when it can import ``paddlelite`` (a 3.10 install with the ``lite`` extra).
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .cache import cache_dir_choice
from .errors import ConfigError
from .fsutil import writable_dir, write_json_atomic

SCHEMA = "edgeforge.toolchain/1"
LITE_PYTHON = (3, 10)
LITE_PACKAGES = ("paddlelite==2.13rc0", "numpy>=1.26,<2", "onnxruntime>=1.23,<1.24")
INSTALL_HINT = "install it with `edgeforge toolchain install lite` (needs a Python 3.10)"
_PROBE = ("import json, platform, sys\n"
          "from importlib.metadata import version\n"
          "out = {'python': platform.python_version(), 'executable': sys.executable}\n"
          "for d in ('paddlelite', 'numpy', 'onnxruntime'):\n"
          "    try:\n"
          "        out[d] = version(d)\n"
          "    except Exception:\n"
          "        out[d] = None\n"
          "print(json.dumps(out))\n")


@dataclass(frozen=True)
class LiteToolchain:
    python: str                  # the interpreter that runs Paddle Lite
    python_version: str
    paddlelite: str
    numpy: str | None
    onnxruntime: str | None
    source: str                  # "managed", "env" (EDGEFORGE_LITE_PYTHON) or "current"

    def versions(self) -> dict:
        """What the cache key and the manifest record."""
        return {"python": self.python_version, "paddlelite": self.paddlelite}


def toolchains_choice() -> tuple[Path, str]:
    """Where toolchains live and who chose it: ``$EDGEFORGE_TOOLCHAINS``, else the cache's."""
    env = os.environ.get("EDGEFORGE_TOOLCHAINS")
    if env:
        return Path(env).expanduser(), "$EDGEFORGE_TOOLCHAINS"
    cache, chosen_by = cache_dir_choice()
    return cache / "toolchains", chosen_by


def toolchains_dir() -> Path:
    return toolchains_choice()[0]


def lite_dir() -> Path:
    return toolchains_dir() / "lite"


def _manifest_path(root: Path) -> Path:
    return root / "toolchain.json"


def probe(python: str, timeout: float = 60) -> dict | None:
    """Python and package versions of an interpreter; None if it does not run."""
    try:
        res = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0:
        return None
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def read_manifest(root: Path | None = None) -> dict | None:
    path = _manifest_path(root or lite_dir())
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = (isinstance(data, dict) and data.get("schema") == SCHEMA
          and isinstance(data.get("python_executable"), str) and isinstance(data.get("python"), str)
          and isinstance(data.get("packages"), dict)
          and isinstance(data["packages"].get("paddlelite"), str))
    return data if ok else None       # a damaged manifest: no managed toolchain


@functools.lru_cache(maxsize=8)
def _resolve(env_value: str | None, managed_root: str) -> LiteToolchain | None:
    if env_value is not None:
        if env_value.strip().lower() in ("", "none", "off"):
            return None
        info = probe(env_value)
        if info is None or not info.get("paddlelite"):
            return None
        return LiteToolchain(env_value, info["python"], info["paddlelite"], info.get("numpy"),
                             info.get("onnxruntime"), "env")
    man = read_manifest(Path(managed_root))
    if man is not None and Path(man["python_executable"]).exists():
        pk = man.get("packages", {})
        return LiteToolchain(man["python_executable"], man["python"], pk["paddlelite"], pk.get("numpy"),
                             pk.get("onnxruntime"), "managed")
    import importlib.util
    if importlib.util.find_spec("paddlelite") is not None:
        from importlib.metadata import PackageNotFoundError, version

        def _v(dist: str) -> str | None:
            try:
                return version(dist)
            except PackageNotFoundError:
                return None
        import platform
        return LiteToolchain(sys.executable, platform.python_version(), _v("paddlelite") or "unknown",
                             _v("numpy"), _v("onnxruntime"), "current")
    return None


def find_lite() -> LiteToolchain | None:
    """The Paddle Lite toolchain edgeforge would use now, or None."""
    return _resolve(os.environ.get("EDGEFORGE_LITE_PYTHON"), str(lite_dir()))


def require_lite(what: str = "this target") -> LiteToolchain:
    """The Lite toolchain, or a ConfigError (exit 2) saying how to install it."""
    tc = find_lite()
    if tc is None:
        raise ConfigError(f"{what} needs the Paddle Lite toolchain, which is not installed",
                          hint=INSTALL_HINT)
    return tc


def lite_versions() -> dict:
    """For manifests: the toolchain's python and paddlelite, or None when there is none."""
    tc = find_lite()
    return {"lite_python": tc.python_version if tc else None, "paddlelite": tc.paddlelite if tc else None}


# ---------------------------------------------------------------- finding a Python 3.10

def _version_of(python: str) -> tuple[tuple[int, int], str] | None:
    try:
        res = subprocess.run([python, "-c", "import sys; print(sys.version_info[0], sys.version_info[1], "
                              "sys.executable)"], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0 or not res.stdout.strip():
        return None
    major, minor, exe = res.stdout.strip().split(" ", 2)
    return (int(major), int(minor)), exe


def _pyenv_candidates() -> list[str]:
    root = os.environ.get("PYENV_ROOT")
    if not root and shutil.which("pyenv"):
        try:
            root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            root = None
    root = root or os.path.expanduser("~/.pyenv")
    versions = Path(root) / "versions"
    if not versions.is_dir():
        return []

    def key(p: Path):
        return [int(x) for x in re.findall(r"\d+", p.name)]
    found = sorted((p for p in versions.glob("3.10.*") if re.fullmatch(r"3\.10\.\d+", p.name)), key=key,
                   reverse=True)
    return [str(p / "bin" / "python3.10") for p in found if (p / "bin" / "python3.10").exists()]


def find_python310(explicit: str | None = None) -> str:
    """A Python 3.10 interpreter: ``explicit``, then python3.10 on PATH, then pyenv's versions."""
    want = ".".join(map(str, LITE_PYTHON))
    if explicit:
        got = _version_of(explicit)
        if got is None:
            raise ConfigError(f"--python {explicit}: does not run")
        if got[0] != LITE_PYTHON:
            raise ConfigError(f"--python {explicit} is Python {got[0][0]}.{got[0][1]}; paddlelite 2.13rc0 "
                              f"needs {want}")
        return got[1]
    candidates = [c for c in [shutil.which(f"python{want}")] if c] + _pyenv_candidates()
    for cand in candidates:
        got = _version_of(cand)
        if got is not None and got[0] == LITE_PYTHON:
            return got[1]
    raise ConfigError(f"no Python {want} found (PATH, pyenv)",
                      hint=f"pass --python /path/to/python{want}, or install one: "
                           f"`pyenv install {want}` or `uv python install {want}`")


# ---------------------------------------------------------------- install / list

def install_lite(python: str | None = None, log: Callable[[str], None] = lambda m: None,
                 pip_args: tuple[str, ...] = ("-q",)) -> dict:
    """Create (or re-create) the managed Lite environment; return its manifest."""
    where, chosen_by = toolchains_choice()
    writable_dir(where, chosen_by, what="toolchains directory", create=False)   # makes nothing yet
    base = find_python310(python)
    root = lite_dir()
    if root.exists():
        log(f"removing the previous toolchain at {root}")
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    log(f"creating a Python {'.'.join(map(str, LITE_PYTHON))} environment at {root} (from {base})")
    _check_call([base, "-m", "venv", str(root)], "python -m venv")
    py = str(root / "bin" / "python")
    log(f"pip install {' '.join(LITE_PACKAGES)}")
    _check_call([py, "-m", "pip", "install", *pip_args, *LITE_PACKAGES], "pip install")
    info = probe(py)
    if info is None or not info.get("paddlelite"):
        raise ConfigError(f"the new environment at {root} cannot report paddlelite's version")
    smoke = subprocess.run([py, "-c", "from paddlelite import lite; lite.Opt()"], capture_output=True,
                           text=True, timeout=120)
    if smoke.returncode != 0:
        raise ConfigError(f"paddlelite does not import in {root}: "
                          f"{(smoke.stderr.strip().splitlines() or ['?'])[-1][:200]}")
    manifest = {"schema": SCHEMA, "name": "lite", "python": info["python"], "python_executable": py,
                "base_python": base,
                "packages": {k: info.get(k) for k in ("paddlelite", "numpy", "onnxruntime")},
                "requirements": list(LITE_PACKAGES),
                "installed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    write_json_atomic(_manifest_path(root), manifest)
    _resolve.cache_clear()
    return manifest


def _check_call(argv: list[str], what: str) -> None:
    res = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if res.returncode != 0:
        tail = " | ".join(ln.strip() for ln in res.stdout.strip().splitlines()[-3:])
        raise ConfigError(f"{what} failed (exit {res.returncode}): {tail[:300]}")


def list_toolchains() -> list[dict]:
    """One row per known toolchain (installed or not): name, status, versions, where."""
    tc = find_lite()
    man = read_manifest()
    row = {"name": "lite", "installed": tc is not None, "source": tc.source if tc else None,
           "python": tc.python_version if tc else None, "paddlelite": tc.paddlelite if tc else None,
           "numpy": tc.numpy if tc else None, "onnxruntime": tc.onnxruntime if tc else None,
           "path": tc.python if tc else str(lite_dir()),
           "installed_at": man.get("installed_at") if (man and tc and tc.source == "managed") else None}
    return [row]


__all__ = ["LiteToolchain", "find_lite", "require_lite", "install_lite", "list_toolchains", "lite_versions",
           "find_python310", "lite_dir", "toolchains_dir", "INSTALL_HINT"]
