"""Files: atomic writes (nothing already built or measured is lost to a failed or interrupted
write), the one reader of configuration files, the one check of a directory edgeforge writes,
and the advisory lock on a build's ``--out``."""
from __future__ import annotations

import codecs
import fcntl
import json
import math
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from .errors import ConfigError

CONFIG_MAX_BYTES = 16 << 20      # no configuration file is larger: /dev/zero is not a config


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


# ---------------------------------------------------------------- reading configuration

def read_config_text(path: str | os.PathLike, what: str) -> str:
    """The text of a configuration file (``what``: "project file", "device inventory", ...).

    UTF-8; a leading UTF-8 byte order mark is accepted and dropped (editors on Windows write
    one). A missing file, a directory, a permission, bytes that are not UTF-8 (the byte and its
    offset) or a file over :data:`CONFIG_MAX_BYTES`: a one-line ConfigError naming the file."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(CONFIG_MAX_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path}: is a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > CONFIG_MAX_BYTES:
        raise ConfigError(f"{what} {path}: larger than {CONFIG_MAX_BYTES >> 20} MB; "
                          "not a configuration file")
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        utf16 = data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{what} {path}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset "
                          f"{exc.start} (line {line})" + (" (a UTF-16 file)" if utf16 else ""),
                          hint="save it as UTF-8") from None


# ---------------------------------------------------------------- directories edgeforge writes

def _chooser(chosen_by: str, path: Path, what: str) -> tuple[str, str]:
    """(how the path is named in a message, what to do instead) for ``chosen_by``: an
    environment variable ("$EDGEFORGE_CACHE"), a flag ("--out"), or a default ("default:
    $EDGEFORGE_CACHE", meaning: nobody chose it, that variable would move it)."""
    default = chosen_by.startswith("default:")
    name = chosen_by.split(":", 1)[1].strip() if default else chosen_by
    if name.startswith("$"):
        fix = f"set {name[1:]} to a writable directory"
        shown = f"{name[1:]}={path}"
    else:
        fix = f"pass {name} a writable directory"
        shown = f"{name} {path}"
    return (f"{what} {path} (the default)" if default else shown), fix


def writable_dir(path: str | os.PathLike, chosen_by: str, *, what: str = "directory",
                 create: bool = True, shown: str | os.PathLike | None = None) -> Path:
    """The one check of a directory edgeforge is about to write into (the cache, results, a
    report, toolchains, a build's parent): ``path`` is a directory, or can be made, and a file
    can be created in it. Else a one-line ConfigError (exit 2) naming the variable or flag
    that chose it (``chosen_by``, see :func:`_chooser`) and what to do. ``create=False`` makes
    nothing: a missing directory is judged by its nearest existing parent, and the probe
    leaves nothing behind. ``shown`` names the path in the message, when that is not ``path``
    itself (``--out DIR`` checks DIR's parent)."""
    path = Path(path)
    label, fix = _chooser(chosen_by, Path(shown) if shown is not None else path, what)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{label}: exists and is a file, not a directory", hint=fix)
    where = path
    while not (where.exists() or where.is_symlink()):
        where = where.parent
    if where == path and not path.exists():
        raise ConfigError(f"{label}: a symlink to nothing ({os.readlink(path)})", hint=fix)
    if not where.is_dir():
        raise ConfigError(f"{label} is below {where}, which is not a directory", hint=fix)
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
            where = path
        os.rmdir(tempfile.mkdtemp(prefix=".edgeforge-probe-", dir=where))
    except OSError as exc:
        raise ConfigError(f"{label}: cannot write in {where} ({exc.strerror or exc})",
                          hint=fix) from None
    return path


# ---------------------------------------------------------------- the lock on --out

LOCK_SUFFIX = ".lock"


def _acquire(lock: Path, timeout_s: float, on_wait, poll_s: float, dest: Path) -> int:
    """An fd holding an exclusive flock on ``lock``. While another holds it, the same fd is
    tried again every ``poll_s`` (so a waiter keeps the file open) until ``timeout_s``. A lock
    file its holder removed while we waited is not the lock any more: open the new one."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = None
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if deadline is None:
                    deadline = time.monotonic() + timeout_s
                    if on_wait is not None:
                        on_wait(f"waiting for {_holder(lock)} into {dest} to finish")
                if time.monotonic() >= deadline:
                    raise ConfigError(f"--out {dest}: {_holder(lock)} still holds {lock} after "
                                      f"{timeout_s:g} s",
                                      hint="wait for it, or build into another --out") from None
                time.sleep(poll_s)
                continue
            try:
                if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except BaseException:
        os.close(fd)
        raise


def _holder(path: Path) -> str:
    try:
        pid = path.read_text().strip()
    except OSError:
        return "another build"
    return f"another build (pid {pid})" if pid.isdigit() else "another build"


@contextmanager
def out_lock(dest: str | os.PathLike, *, timeout_s: float,
             on_wait: Callable[[str], None] | None = None, poll_s: float = 0.2) -> Iterator[None]:
    """Hold the advisory lock of a build's ``--out`` (``<dest>.lock``, an flock) while the
    build runs: a second build into the same ``--out`` waits for the first (``on_wait`` gets
    one line saying whose lock it waits for), then builds; after ``timeout_s`` it refuses
    (ConfigError, exit 2). The lock file holds the holder's pid and is removed when released;
    directories made for it are removed again if nothing else was put in them."""
    dest = Path(dest)
    lock = dest.with_name(dest.name + LOCK_SUFFIX)
    made = [p for p in [lock.parent, *lock.parent.parents] if not p.exists()]
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = _acquire(lock, timeout_s, on_wait, poll_s, dest)
    except OSError as exc:
        _remove_empty(made)
        raise ConfigError(f"--out {dest}: cannot lock {lock} ({exc.strerror or exc})",
                          hint="pass --out a writable directory") from None
    except BaseException:
        _remove_empty(made)
        raise
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        try:
            lock.unlink()            # before the unlock: a waiter then sees a stale inode
        except OSError:
            pass
        os.close(fd)
        _remove_empty(made)


def _remove_empty(dirs: list[Path]) -> None:
    for d in dirs:                    # deepest first
        try:
            d.rmdir()
        except OSError:
            return


def check_ours(path: str | os.PathLike, flag: str, marks: tuple[bytes, ...], what: str) -> None:
    """Refuse (ConfigError, one line naming ``flag`` and the path) to replace ``path`` unless
    edgeforge wrote it, as ``build --out`` replaces only a previous build: a symlink, a
    directory, or a file whose first 4 KiB hold none of ``marks`` (what edgeforge writes at the
    head of such a file) is the user's. A path that does not exist is free."""
    from .errors import ConfigError

    p = Path(path)
    if not (p.exists() or p.is_symlink()):
        return
    kind = "a symlink" if p.is_symlink() else "a directory" if p.is_dir() else None
    if kind is None:
        try:
            with open(p, "rb") as fh:
                head = fh.read(4096)
        except OSError:
            head = b""
        if any(m in head for m in marks):
            return
        kind = "a file"
    raise ConfigError(f"{flag} {p} exists and is {kind} edgeforge did not write ({what})",
                      hint="edgeforge replaces only its own output: choose another path or remove it yourself")
