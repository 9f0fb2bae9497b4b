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


def tiny_project(root: Path, name: str, model_src: str, shape: list[int], samples: int = 32,
                 ranges: dict | None = None, data_shape: list[int] | None = None) -> Path:
    """A one-input project (factory ``model:build``, no weights) with N(0,1) calibration and
    evaluation data of ``shape`` (first dim -1). ``ranges``: ``{"min_shape": [...], "opt_shape":
    [...], "max_shape": [...]}`` for the input; ``data_shape``: a sample's shape in the data
    files (default ``shape[1:]``; needed where ``shape`` has a free dimension beyond the batch)."""
    import textwrap

    import numpy as np

    root.mkdir(parents=True)
    (root / "model.py").write_text(model_src)
    (root / "edgeforge.toml").write_text(textwrap.dedent(f"""
        name = "{name}"
        [model]
        factory = "model:build"
        [[model.inputs]]
        name = "x"
        shape = {list(shape)}
        dtype = "float32"
        {{ranged}}
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        """).replace("{ranged}", "\n".join(f"{k} = {list(v)}" for k, v in (ranges or {}).items())))
    (root / "data").mkdir()
    rng = np.random.default_rng(0)
    for part in ("calib", "eval"):
        np.savez(root / "data" / f"{part}.npz", x=rng.normal(size=(samples, *(data_shape or shape[1:]))).astype("float32"))
    return root


def readonly_tmpfs(d: Path, keep: dict[str, str] | None = None):
    """A contextmanager: mount a read-only tmpfs on ``d`` (made), holding the files ``keep``
    ({name: text}), unmounted on exit. Needs root (chmod 0555 would not stop root): callers
    skip without it."""
    from contextlib import contextmanager

    @contextmanager
    def mounted():
        d.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], check=True)
        try:
            for name, text in (keep or {}).items():
                (d / name).write_text(text)
            subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
            yield d
        finally:
            subprocess.run(["umount", str(d)], check=False)
    return mounted()


def where_installed(python: Path, tmp_path: Path, columns: str) -> tuple[dict, Path, str, str]:
    """Run an installed edgeforge from outside the source tree, with no EDGEFORGE_* settings and a
    fresh cache: (env, work dir, edgeforge package file, targets dir) as that interpreter sees them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGEFORGE_", "PYTHONPATH", "VIRTUAL_ENV"))}
    env.update(EDGEFORGE_CACHE=str(tmp_path / "cache"), COLUMNS=columns)
    work = tmp_path / "work"
    work.mkdir()
    where = subprocess.run([str(python), "-c", "import edgeforge, edgeforge.targets as t; "
                            "print(edgeforge.__file__); print(t.targets_dir())"],
                           cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    pkg, targets = where.stdout.split()
    return env, work, pkg, targets
