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
