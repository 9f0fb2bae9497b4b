"""Run native converters in a child process; turn a crash into a clear error.

Paddle Lite's optimizer and paddle2onnx abort or segfault on inputs they do not handle, which
would take the whole edgeforge process down. Here they run in a spawned child whose stdout and
stderr go to a log file; a signal or a non-zero exit becomes a PassError naming the pass and,
where the log or the caller can tell, the op.
"""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable

from .errors import ConverterCrash, PassError

_OP_PATTERNS = [
    re.compile(r"found for (\w+)"),                       # No attributes called beta found for swish
    re.compile(r"op[_ ]type[:= ]+\"?(\w+)"),
    re.compile(r"[Oo]perator\s*[\"'(]?(\w+)"),
    re.compile(r"(\w+) is not supported"),
    re.compile(r"Unsupported op(?:erator)?[^\w]*(\w+)"),
]


def _child_main(job_path: str) -> None:
    """Entry point of the child: ``python -m edgeforge.native JOB``. Runs one function."""
    import importlib
    import pickle

    with open(job_path, "rb") as fh:
        module, name, args = pickle.load(fh)
    try:
        fn = getattr(importlib.import_module(module), name)
        outcome = ("ok", fn(*args))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        traceback.print_exc()
        outcome = ("error", f"{type(exc).__name__}: {exc}")
    with open(job_path + ".out", "wb") as fh:
        pickle.dump(outcome, fh)


def ops_in_log(text: str) -> list[str]:
    found: list[str] = []
    for pat in _OP_PATTERNS:
        for m in pat.finditer(text):
            if m.group(1) not in found:
                found.append(m.group(1))
    return found


_CHATTER = ("Loading topology data", "Loading params data", "1. Model is successfully loaded",
            "[Paddle2ONNX] Start", "[Paddle2ONNX] Model file", "[Paddle2ONNX] Parameters file")


def last_lines(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not set(ln.strip()) <= set("-=*") and not ln.strip().startswith(_CHATTER)]
    return " | ".join(lines[-n:])[:400]


def _spawn(argv: list[str], log_path: Path, pass_name: str, what: str, hint: str | None,
           timeout: float | None) -> int:
    """The child runs in a process group of its own; a timeout, an interrupt (SIGINT, SIGTERM,
    SIGHUP: :mod:`edgeforge.stop_signals`) or any other exception here ends the whole group
    (the child and whatever it started: a user metric's own processes) before it propagates."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log_fh:
        try:
            proc = subprocess.Popen(argv, stdout=log_fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as exc:
            raise PassError(pass_name, f"{what}: cannot start {argv[0]} ({exc.strerror or exc})",
                            hint=hint) from None
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _end_group(proc)
            raise PassError(pass_name, f"{what} did not finish within {timeout:.0f}s", hint=hint) from None
        except BaseException:
            _end_group(proc)
            raise
        finally:
            _end_group(proc, only_strays=True)


def _end_group(proc: subprocess.Popen, only_strays: bool = False) -> None:
    """SIGKILL the child's process group and reap the child. ``only_strays``: after a child that
    exited, end what it left running in its group (nothing, normally)."""
    import os

    if only_strays and proc.returncode is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.returncode is None:
        proc.wait()


def run_native(pass_name: str, what: str, fn: Callable, args: Iterable[Any], log_path: Path,
               suspects: Callable[[], list[str]] | None = None, hint: str | None = None,
               timeout: float | None = 1800) -> Any:
    """Run ``fn(*args)`` (a module-level function) in a fresh Python process (this interpreter).

    The child's stdout/stderr go to ``log_path``. A signal, a non-zero exit or an exception in
    the child becomes a PassError naming the pass, what ran and, where known, the op.
    """
    import pickle

    log_path = Path(log_path)
    with tempfile.TemporaryDirectory(prefix="edgeforge-native-") as tmp:
        job = Path(tmp) / "job.pkl"
        with open(job, "wb") as fh:
            pickle.dump((fn.__module__, fn.__qualname__, tuple(args)), fh)
        code = _spawn([sys.executable, "-m", "edgeforge.native", str(job)], log_path, pass_name, what, hint,
                      timeout)
        result = None
        out = Path(str(job) + ".out")
        if out.is_file():
            with open(out, "rb") as fh:
                result = pickle.load(fh)
    if result is not None and result[0] == "ok" and code == 0:
        return result[1]
    _fail(pass_name, what, code, result[1] if result and result[0] == "error" else None, log_path,
          suspects, hint)


def run_script(pass_name: str, what: str, argv: list[str], job: dict, log_path: Path,
               suspects: Callable[[], list[str]] | None = None, hint: str | None = None,
               timeout: float | None = 1800) -> Any:
    """Run ``argv + [JOB.json]`` (another interpreter and a script with no edgeforge import).

    The script reads the JSON job and writes ``{"ok": value}`` or ``{"error": message}`` to
    ``JOB.json.out``; crashes and errors are reported exactly as run_native reports them.
    """
    import json

    log_path = Path(log_path)
    with tempfile.TemporaryDirectory(prefix="edgeforge-native-") as tmp:
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job))
        code = _spawn([*argv, str(job_path)], log_path, pass_name, what, hint, timeout)
        out = Path(str(job_path) + ".out")
        try:
            result = json.loads(out.read_text()) if out.is_file() else None
        except ValueError:
            result = None
    if result is not None and "ok" in result and code == 0:
        return result["ok"]
    _fail(pass_name, what, code, (result or {}).get("error"), log_path, suspects, hint)


def _fail(pass_name: str, what: str, code: int | None, error: str | None, log_path: Path,
          suspects: Callable[[], list[str]] | None, hint: str | None) -> None:
    """Raise the one-line PassError/ConverterCrash for a child that did not succeed."""
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    ops = ops_in_log(log)
    known: list[str] = []
    if suspects is not None:
        try:
            known = suspects()          # "op (remedy)" from the pre-flight check
        except Exception:  # noqa: BLE001 - naming suspects is best effort
            known = []
    if ops:
        # the log named the op: attach the pre-flight remedy where there is one
        by_op = {k.split(" ", 1)[0]: k for k in known}
        ops = [by_op.get(op, op) for op in ops]
    else:
        ops = known
    op_note = f" at op {'; '.join(ops[:3])}" if ops else ""
    if error is not None:   # a Python exception inside the child
        raise PassError(pass_name, f"{what} failed{op_note}: {error.splitlines()[0][:300] if error else '?'}",
                        hint=hint or f"see {log_path}")
    if code is not None and code < 0:
        signame = signal.Signals(-code).name
        detail = last_lines(log)
        raise ConverterCrash(
            pass_name,
            f"{what} crashed ({signame}){op_note}" + (f": {detail}" if detail else ""),
            hint=hint or "try another backend (--backend onnx) or keep the layer in float; "
                         "`edgeforge check` lists the ops this target cannot take",
        )
    raise PassError(pass_name, f"{what} exited with code {code}{op_note}: {last_lines(log)}", hint=hint)


if __name__ == "__main__":
    import sys as _sys

    _child_main(_sys.argv[1])
