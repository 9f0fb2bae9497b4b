"""Write a group of files so that none is ever seen half-written."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_files_atomic(files: dict[Path, str | bytes]) -> None:
    """Write every file to a temporary beside it (fsynced), then rename each into place.

    Everything is rendered by the caller before this runs, and every temporary is complete before
    the first rename, so a failure leaves the previous files as they were.
    """
    staged: list[tuple[str, Path]] = []
    try:
        for path, content in files.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            staged.append((tmp, path))
            data = content.encode("utf-8") if isinstance(content, str) else content
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a report is for others to read
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
