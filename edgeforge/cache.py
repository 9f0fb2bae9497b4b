"""Content-addressed store for pass outputs.

A key is a full sha256 over the input artifact's content digest, the pass name and version,
its config and the target facts it depends on. An entry is a directory written atomically.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def sha256_json(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def digest_files(files: Iterable[tuple[str, Path]]) -> str:
    """sha256 over (name, content digest) pairs, in name order."""
    h = hashlib.sha256()
    for name, path in sorted(files, key=lambda item: item[0]):
        h.update(name.encode() + b"\0" + sha256_file(path).encode() + b"\n")
    return h.hexdigest()


def digest_tree(root: Path) -> str:
    return digest_files((p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file())


# The build code: every file whose edits can change what a pass writes, relative to the edgeforge
# package (a directory: every .py below it). A cached pass output is reused only while all of it is
# byte-identical, even if nobody bumped a pass version. Anything else (the CLI, device/, report/,
# results/) can change without invalidating a build. tests/unit/test_build_code.py checks that
# everything the passes and the pipeline import is listed here.
BUILD_CODE = (
    "passes", "quant", "runner/edgeforge_runner.py", "lite_child.py",
    "cache.py", "config.py", "contracts.py", "errors.py", "fsutil.py", "native.py", "paddle_env.py",
    "pipeline.py", "project.py", "targets.py", "toolchain.py", "weights.py",
)
_PACKAGE_ROOT = Path(__file__).resolve().parent
_build_code_digests: dict[Path, str] = {}


def build_code_files(root: Path = _PACKAGE_ROOT) -> list[Path]:
    """The files of :data:`BUILD_CODE` under ``root`` (the edgeforge package directory)."""
    files = []
    for entry in BUILD_CODE:
        path = root / entry
        if path.is_dir():
            files += [f for f in path.rglob("*.py") if "__pycache__" not in f.parts]
        elif path.is_file():
            files.append(path)
        else:  # a moved or renamed module must not silently drop out of the digest
            raise FileNotFoundError(f"cache.BUILD_CODE names {entry}, which is not in {root}")
    return sorted(files)


def build_code_digest(root: Path = _PACKAGE_ROOT) -> str:
    """sha256 over :func:`build_code_files` (names and contents); computed once per root."""
    root = Path(root).resolve()
    if root not in _build_code_digests:
        _build_code_digests[root] = digest_files((f.relative_to(root).as_posix(), f)
                                                 for f in build_code_files(root))
    return _build_code_digests[root]


def default_cache_dir() -> Path:
    env = os.environ.get("EDGEFORGE_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "edgeforge"


class Cache:
    def __init__(self, root: Path | None = None, enabled: bool = True):
        self.root = Path(root) if root else default_cache_dir()
        self.enabled = enabled

    def key(self, *, pass_name: str, version: int, config: Any, target: Any, input_digest: str) -> str:
        return sha256_json({"pass": pass_name, "version": version, "config": config,
                            "target": target, "input": input_digest})

    def entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> tuple[Path, dict] | None:
        if not self.enabled:
            return None
        entry = self.entry(key)
        meta_file = entry / "entry.json"
        if not meta_file.is_file():
            return None
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError):
            return None
        out = entry / "artifact"
        # A cached entry must still hold the exact bytes it was stored with.
        if not out.is_dir() or digest_tree(out) != meta.get("content_digest"):
            shutil.rmtree(entry, ignore_errors=True)
            return None
        return out, meta

    def put(self, key: str, produced: Path, meta: dict) -> tuple[Path, dict]:
        """Move ``produced`` (a directory) into the store atomically; return its new place."""
        meta = dict(meta, content_digest=digest_tree(produced))
        if not self.enabled:
            return produced, meta
        entry = self.entry(key)
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=entry.parent))
        shutil.copytree(produced, tmp / "artifact")
        (tmp / "entry.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)
        try:
            os.replace(tmp, entry)
        except OSError:  # another process stored the same key first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
        return entry / "artifact", meta

    def clear(self) -> int:
        if not self.root.exists():
            return 0
        n = sum(1 for _ in self.root.glob("*/*"))
        shutil.rmtree(self.root)
        return n
