"""Content-addressed store for pass outputs.

A key is a full sha256 over the input artifact's content digest, the pass name and version,
its config and the target facts it depends on. An entry is a directory written atomically:
``artifact/`` (the pass output), ``entry.json`` (its meta and content digest) and, when the pass
measured something on the host, ``measured.json`` (outside the digest; see
:mod:`edgeforge.pipeline`). ``stats.json`` at the root counts hits, misses and bytes moved.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

from .errors import ConfigError
from .fsutil import writable_dir

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
# everything the passes and the pipeline import is listed here (and, of the runner, only that).
RUNNER_BUILD_CODE = tuple(f"runner/{m}.py" for m in (
    "__init__", "device_facts", "limits", "metrics", "pipeline", "postprocess", "predictors", "protocol"))
BUILD_CODE = (
    "passes", "quant", "lite_child.py",
    # the runner modules the passes import (the host half); its device-only modules (bench, load,
    # smoke, timing, profile, end_to_end, main) are outside: editing them keeps every cached step
    *RUNNER_BUILD_CODE,
    "cache.py", "config.py", "contracts.py", "errors.py", "fold_data.py", "fsutil.py", "inference.py", "native.py",
    "paddle_env.py", "quiet.py", "__init__.py", "manifest.py", "build_meta.py", "oserror.py",
    # the build's INT8 speed verdict (quantize's speed alternative) uses the report's statistics
    "report/compare.py", "report/int8_procedure.py", "report/load.py", "report/pairing.py",
    "results/schema.py", "results/stats.py",
    "pipeline.py", "project.py", "targets.py", "toolchain.py", "weights.py", "task",
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


CACHE_VAR = "$EDGEFORGE_CACHE"


def cache_dir_choice() -> tuple[Path, str]:
    """The cache directory and who chose it (for :func:`edgeforge.fsutil.writable_dir`):
    ``$EDGEFORGE_CACHE``, else ``$XDG_CACHE_HOME/edgeforge`` or ``~/.cache/edgeforge``."""
    env = os.environ.get("EDGEFORGE_CACHE")
    if env:
        return Path(env).expanduser(), CACHE_VAR
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "edgeforge", f"default: {CACHE_VAR}"


def default_cache_dir() -> Path:
    return cache_dir_choice()[0]


def entry_json(meta: dict) -> str:
    """An entry's ``entry.json`` text: the same bytes for the same meta on every host."""
    return json.dumps(meta, indent=2, sort_keys=True)


class Cache:
    """The store. Reading never needs a writable directory (a warm read-only cache serves its
    hits); the first :meth:`put` checks that the directory can be written, once, through
    :func:`edgeforge.fsutil.writable_dir`: exit 2 naming the variable that chose it."""

    def __init__(self, root: Path | None = None, enabled: bool = True):
        if root:
            self.root, self.chosen_by = Path(root), "cache_dir"
        else:
            self.root, self.chosen_by = cache_dir_choice()
        self.enabled = enabled
        self.remote = None              # set by edgeforge.remote_cache.open_cache
        self._checked = False

    def check_writable(self) -> None:
        if not self._checked:
            writable_dir(self.root, self.chosen_by, what="cache directory")
            self._checked = True

    def key(self, *, pass_name: str, version: int, config: Any, target: Any, input_digest: str) -> str:
        return sha256_json({"pass": pass_name, "version": version, "config": config,
                            "target": target, "input": input_digest})

    def entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def get(self, key: str) -> tuple[Path, dict] | None:
        """(the artifact directory, the entry: meta, content digest and ``measured``), or None."""
        if not self.enabled:
            return None
        entry = self.entry(key)
        meta_file = entry / "entry.json"
        try:                    # a cache under a file, or one we may not read: a miss
            if not meta_file.is_file():
                return None
            meta = json.loads(meta_file.read_text())
            out = entry / "artifact"
            # A cached entry must still hold the exact bytes it was stored with.
            intact = isinstance(meta, dict) and out.is_dir() and digest_tree(out) == meta.get("content_digest")
        except (OSError, ValueError):
            return None
        if not intact:
            shutil.rmtree(entry, ignore_errors=True)
            return None
        return out, dict(meta, measured=self.measured(key))

    def measured(self, key: str) -> list:
        """The side record of what the pass measured on the host that built it (or [])."""
        try:
            pairs = json.loads((self.entry(key) / "measured.json").read_text())
        except (OSError, ValueError):
            return []
        return pairs if isinstance(pairs, list) else []

    def put(self, key: str, produced: Path, meta: dict, measured: list | None = None) -> tuple[Path, dict]:
        """Copy ``produced`` (a directory) into the store atomically; return its new place."""
        meta = dict(meta, content_digest=digest_tree(produced))
        if not self.enabled:
            return produced, meta
        self.check_writable()
        entry = self.entry(key)
        tmp = None
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=entry.parent))
            shutil.copytree(produced, tmp / "artifact")
            (tmp / "entry.json").write_text(entry_json(meta))
            if measured:
                (tmp / "measured.json").write_text(json.dumps(measured, sort_keys=True))
        except OSError as exc:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise ConfigError(f"cache directory {self.root}: cannot store an entry "
                              f"({exc.strerror or exc})",
                              hint="free space there, point EDGEFORGE_CACHE elsewhere, "
                                   "or build with --no-cache") from None
        self.adopt(key, tmp)
        return entry / "artifact", meta

    def staging(self, key: str) -> Path:
        """A fresh directory beside the entry (same file system) for :meth:`adopt`."""
        self.check_writable()
        parent = self.entry(key).parent
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=parent))

    def adopt(self, key: str, tmp: Path) -> None:
        """Rename ``tmp`` (a whole entry) into place, replacing what is there."""
        entry = self.entry(key)
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)
        try:
            os.replace(tmp, entry)
        except OSError:  # another process stored the same key first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)

    # ------------------------------------------------------------ counters (cache stats)

    def count_event(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` in ``stats.json`` (under a lock); never fails a build."""
        if not self.enabled or n == 0:
            return
        import fcntl

        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with open(self.root / "stats.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                stats = self.stats()
                stats[name] = int(stats.get(name, 0)) + int(n)
                tmp = self.root / f".stats-{os.getpid()}.json"
                tmp.write_text(json.dumps(stats, indent=2, sort_keys=True))
                os.replace(tmp, self.root / "stats.json")
        except OSError:
            pass

    def stats(self) -> dict:
        try:
            stats = json.loads((self.root / "stats.json").read_text())
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in stats.items() if isinstance(v, int)} if isinstance(stats, dict) else {}

    def count(self) -> int:
        try:
            return sum(1 for p in self.root.glob("*/*") if not p.name.startswith(".")) if self.root.is_dir() else 0
        except OSError:
            return 0

    def clear(self) -> int:
        if not self.root.exists():
            return 0
        if not self.root.is_dir():
            self.check_writable()             # refuses a file, naming the variable
        n = self.count()
        self.check_writable()
        try:
            shutil.rmtree(self.root)
        except OSError as exc:
            raise ConfigError(f"cache directory {self.root}: cannot remove it "
                              f"({exc.strerror or exc})") from None
        return n
