"""Atomic writes: nothing already built or measured is lost to a failed or interrupted write."""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def json_safe(obj: Any) -> Any:
    """NaN and infinities are not JSON: they become null (recursively)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def _stage(path: Path, data: bytes) -> str:
    """Write ``data`` to a fresh temporary beside ``path`` (fsynced, mode 0666 less the umask:
    mkstemp's 0600 would hide a report or manifest from other users); return its name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _bytes(content: str | bytes) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else content


def dumps_json(obj: Any) -> str:
    """The project's JSON file format: indented, a final newline, NaN and infinities as null."""
    return json.dumps(json_safe(obj), indent=2, allow_nan=False) + "\n"


def write_files_atomic(files: dict[Path, str | bytes]) -> None:
    """Write every file to a temporary beside it (fsynced), then rename each into place.

    Everything is rendered by the caller before this runs, and every temporary is complete before
    the first rename, so a failure leaves the previous files as they were.
    """
    staged: list[tuple[str, Path]] = []
    try:
        for path, content in files.items():
            staged.append((_stage(Path(path), _bytes(content)), Path(path)))
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    write_files_atomic({Path(path): dumps_json(obj)})


def write_new_file(directory: Path, name: str, content: str | bytes) -> Path | None:
    """Write ``content`` atomically as ``directory/name``, or, when that name is taken, as
    ``stem-2.ext``, ``stem-3.ext``, ...: never over an existing file. None when 9999 are taken."""
    directory = Path(directory)
    tmp = _stage(directory / name, _bytes(content))
    stem, dot, ext = name.rpartition(".") if "." in name else (name, "", "")
    try:
        for i in range(1, 10000):
            final = directory / (name if i == 1 else f"{stem}-{i}{dot}{ext}")
            try:
                os.link(tmp, final)          # fails if the name is taken: no overwrite, ever
            except FileExistsError:
                continue
            except OSError:                  # no hard links here: claim the name, then replace it
                try:
                    os.close(os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                except FileExistsError:
                    continue
                os.replace(tmp, final)
            return final
        return None
    finally:
        Path(tmp).unlink(missing_ok=True)


def _umask_modes(root: Path) -> None:
    """Give ``root`` and everything under it the modes a plain mkdir/open would (0777/0666 less
    the umask; executables keep their x bits): mkdtemp's 0700 and a cache entry's modes must not
    leak into what the user gets."""
    mask = _umask()
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o777 & ~mask)
        for name in filenames:
            f = os.path.join(dirpath, name)
            if not os.path.islink(f):
                x = os.stat(f).st_mode & 0o111
                os.chmod(f, (0o777 if x else 0o666) & ~mask)


@contextmanager
def atomic_dir(dest: Path) -> Iterator[Path]:
    """Yield a temporary directory beside ``dest``; on success it replaces ``dest`` whole.

    On any failure, including the final renames, the temporary directory is removed and
    ``dest`` is left as it was (an OSError from the renames is re-raised after that). Modes
    follow the umask.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        yield tmp
        _umask_modes(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    try:
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
            os.rmdir(old)
            os.replace(dest, old)
        os.replace(tmp, dest)
    except BaseException:
        if old is not None and old.exists() and not dest.exists():
            os.replace(old, dest)                 # put the previous build back
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
