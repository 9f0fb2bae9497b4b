"""One wording for an OSError in a message: what went wrong and the file it went wrong on.

``exc.strerror`` alone ("No such file or directory") drops the file, and ``str(exc)`` gives
"[Errno 2] ..." noise; :func:`os_error_text` gives "No such file or directory: 'x.json'" (both
names for a rename), or ``str(exc)`` when the error has no errno (paramiko's SFTP errors).
"""
from __future__ import annotations

import os


def os_error_text(exc: OSError, path: str | os.PathLike | None = None) -> str:
    """``exc``'s reason and file: "Permission denied: 'out/report.md'". ``path``: the file the
    caller was working on, named when the error itself names none."""
    reason = exc.strerror or (str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    names = [n for n in (exc.filename, getattr(exc, "filename2", None)) if n is not None]
    if not names and path is not None:
        names = [path]
    if not names:
        return reason
    return f"{reason}: " + " -> ".join(repr(os.fsdecode(n)) for n in names)
