"""Run native converters in a child process; turn a crash into a clear error.

Paddle Lite's optimizer and paddle2onnx abort or segfault on inputs they do not handle, which
would take the whole edgeforge process down. Here they run in a spawned child whose stdout and
stderr go to a log file; a signal or a non-zero exit becomes a PassError naming the pass and,
where the log or the caller can tell, the op.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
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


def _child(fn: Callable, args: tuple, log_path: str, conn) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    try:
        result = fn(*args)
        conn.send(("ok", result))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        traceback.print_exc()
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def ops_in_log(text: str) -> list[str]:
    found: list[str] = []
    for pat in _OP_PATTERNS:
        for m in pat.finditer(text):
            if m.group(1) not in found:
                found.append(m.group(1))
    return found


def last_lines(text: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not set(ln.strip()) <= set("-=*")]
    return " | ".join(lines[-n:])[:400]


def run_native(pass_name: str, what: str, fn: Callable, args: Iterable[Any], log_path: Path,
               suspects: Callable[[], list[str]] | None = None, hint: str | None = None,
               timeout: float | None = 1800) -> Any:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, tuple(args), str(log_path), child), daemon=True)
    proc.start()
    child.close()
    result = None
    if parent.poll(timeout):
        try:
            result = parent.recv()
        except EOFError:
            result = None
    proc.join(timeout=30 if result is not None else 5)
    if proc.is_alive():
        proc.kill()
        proc.join()
        if result is None:
            raise PassError(pass_name, f"{what} did not finish within {timeout:.0f}s", hint=hint)
    log = log_path.read_text(errors="replace") if log_path.exists() else ""
    if result is not None and result[0] == "ok":
        return result[1]
    code = proc.exitcode
    ops = ops_in_log(log)
    if not ops and suspects is not None:
        try:
            ops = suspects()
        except Exception:  # noqa: BLE001 - naming suspects is best effort
            ops = []
    op_note = f" at op {', '.join(ops[:3])}" if ops else ""
    if result is not None:   # a Python exception inside the child
        raise PassError(pass_name, f"{what} failed{op_note}: {result[1].splitlines()[0][:300]}",
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
