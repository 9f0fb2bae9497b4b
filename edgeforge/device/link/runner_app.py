"""The runner as devices get it: one zipapp of the ``edgeforge/runner`` package (``remote/``, the
inline helper scripts, left out), named and keyed by its sha256 and uploaded by digest like the
build's own files. Deterministic: entries sorted, fixed timestamps and permissions, stored
uncompressed (no zlib version in the bytes), so its sha256 is a function of the sources alone:
every host builds the same file and a device holds it once.

Built into ``<cache dir>/runner/`` (or a temporary directory when the cache cannot be written),
never into the source tree; a file already there with the right name is the same bytes.
"""
from __future__ import annotations

import hashlib
import io
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ...cache import default_cache_dir
from ...runner import PACKAGE_DIR

PACKAGE = "edgeforge_runner"            # the package's name inside the zipapp
APP_PREFIX = PACKAGE + "-"               # edgeforge_runner-<sha256[:12]>.pyz (remote/lease.py looks for it)
ZIP_DATE = (1980, 1, 1, 0, 0, 0)         # the earliest a zip can hold
MAIN = ("import sys\n\nfrom %s.main import main\n\nsys.exit(main())\n" % PACKAGE).encode()


@dataclass(frozen=True)
class RunnerApp:
    path: Path          # the .pyz on this host
    sha256: str

    @property
    def name(self) -> str:
        """Its file name on the device: ``edgeforge_runner-<sha256[:12]>.pyz``."""
        return f"{APP_PREFIX}{self.sha256[:12]}.pyz"


def package_files(root: Path = PACKAGE_DIR) -> list[tuple[str, Path]]:
    """(name in the zip, file) for every module of the runner package but ``remote/``, sorted."""
    out = []
    for f in root.rglob("*.py"):
        rel = f.relative_to(root)
        if rel.parts[0] in ("remote", "__pycache__") or "__pycache__" in rel.parts:
            continue
        out.append((f"{PACKAGE}/{rel.as_posix()}", f))
    return sorted(out)


def _entry(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
    info.external_attr = 0o100644 << 16       # a regular file, rw-r--r--
    info.create_system = 3                    # unix, whatever the host
    info.compress_type = zipfile.ZIP_STORED
    zf.writestr(info, data)


def app_bytes(root: Path = PACKAGE_DIR) -> bytes:
    """The zipapp's bytes: ``__main__.py`` then the package, in name order."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        _entry(zf, "__main__.py", MAIN)
        for name, f in package_files(root):
            _entry(zf, name, f.read_bytes())
    return buf.getvalue()


def _write_once(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return path
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".pyz")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path


def runner_app(root: Path = PACKAGE_DIR, out_dir: Path | None = None) -> RunnerApp:
    """Build the zipapp of the package at ``root`` into ``out_dir`` (default: the cache's
    ``runner/``, else a temporary directory) and return it with its digest."""
    data = app_bytes(root)
    digest = hashlib.sha256(data).hexdigest()
    name = RunnerApp(Path(), digest).name
    if out_dir is not None:
        return RunnerApp(_write_once(Path(out_dir), name, data), digest)
    try:
        return RunnerApp(_write_once(default_cache_dir() / "runner", name, data), digest)
    except OSError:         # a read-only cache: a directory of this user's own under the temp dir
        return RunnerApp(_write_once(Path(tempfile.gettempdir()) / f"edgeforge-runner-{os.getuid()}", name, data),
                         digest)
