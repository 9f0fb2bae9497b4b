"""What a person reads is edgeforge's own: native libraries' output goes to the step's log.

onnxruntime's C++ logger ("Removing initializer ...", with ANSI colour codes), Paddle's glog and
deprecation lines, paddle2onnx's banner and Python warnings or log records of the libraries all
write to file descriptors 1 and 2, or to ``sys.stdout``/``sys.stderr``. :func:`native_to_log`
points both descriptors and both Python streams at a log file while a build step runs.
edgeforge's own lines (the progress display) go through :data:`TERMINAL`, a stream that always
reaches the terminal the process started with.
"""
from __future__ import annotations

import io
import logging
import os
import sys
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

_lock = threading.RLock()
_state: dict = {"depth": 0, "err": None, "out": None}


class _Terminal(io.TextIOBase):
    """sys.stderr (or stdout) as it was before any redirect: where edgeforge's own lines go."""

    def __init__(self, which: str):
        self._which = which

    def _target(self):
        held = _state[self._which]
        return held if held is not None else _unwrap(getattr(sys, "stderr" if self._which == "err" else "stdout"))

    def write(self, s: str) -> int:
        return self._target().write(s)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        t = self._target()
        return bool(getattr(t, "isatty", lambda: False)())

    def fileno(self) -> int:
        return self._target().fileno()

    @property
    def encoding(self):
        return getattr(self._target(), "encoding", "utf-8")


TERMINAL = _Terminal("err")
TERMINAL_OUT = _Terminal("out")


def _unwrap(stream):
    """The stream behind rich's Live redirection (a FileProxy writes through the console, which
    writes here: without this, a loop)."""
    while hasattr(stream, "rich_proxied_file"):
        stream = stream.rich_proxied_file
    return stream


def _fd_backed(stream, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


@contextmanager
def native_to_log(log_path: Path):
    """Everything written to fds 1/2 and sys.stdout/sys.stderr goes to ``log_path`` (appended)
    until the block ends; :data:`TERMINAL` still reaches the terminal. Nested or concurrent
    uses (a fleet's threads) share the outermost log."""
    saved = None
    with _lock:
        _state["depth"] += 1
        if _state["depth"] == 1:
            try:
                saved = _redirect(Path(log_path))
            except OSError:         # no descriptor to redirect (a closed fd 2): the output goes where it did
                saved = None
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1
            if saved is not None:
                _restore(saved)


def _redirect(log_path: Path) -> dict:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except (AttributeError, OSError, ValueError):
            pass
    kept = {1: os.dup(1)}
    try:
        kept[2] = os.dup(2)
    except OSError:
        os.close(kept[1])
        raise
    log = open(log_path, "a", encoding="utf-8", errors="replace", buffering=1)
    saved = {"stdout": sys.stdout, "stderr": sys.stderr, "log": log, "fds": kept, "handler": None,
             "showwarning": warnings.showwarning}
    for fd, name, key in ((1, "stdout", "out"), (2, "stderr", "err")):
        stream = _unwrap(getattr(sys, name))
        keep = kept[fd]
        # edgeforge's own lines: the stream as it was, or the terminal behind the descriptor
        _state[key] = (os.fdopen(os.dup(keep), "w", encoding="utf-8", errors="replace", buffering=1)
                       if _fd_backed(stream, fd) else stream)
        os.dup2(log.fileno(), fd)
    sys.stdout = sys.stderr = log
    handler = logging.StreamHandler(log)
    logging.getLogger().addHandler(handler)
    saved["handler"] = handler

    def showwarning(message, category, filename, lineno, file=None, line=None):
        log.write(warnings.formatwarning(message, category, filename, lineno, line))
    warnings.showwarning = showwarning
    return saved


def _restore(saved: dict) -> None:
    log = saved["log"]
    try:
        log.flush()
    except (OSError, ValueError):
        pass
    for fd, keep in saved["fds"].items():
        os.dup2(keep, fd)
        os.close(keep)
    sys.stdout, sys.stderr = saved["stdout"], saved["stderr"]
    logging.getLogger().removeHandler(saved["handler"])
    warnings.showwarning = saved["showwarning"]
    for key in ("out", "err"):
        held = _state[key]
        _state[key] = None
        if held is not None and held not in (saved["stdout"], saved["stderr"]):
            try:
                held.close()
            except (OSError, ValueError):
                pass
    log.close()
