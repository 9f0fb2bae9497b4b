"""Helpers for the device tests (tests/device is on sys.path under pytest's default import mode)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _sighup_default():
    import signal

    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def run_cli_subprocess(*args, timeout=120, **kw):
    """``edgeforge ARGS`` in a child the tests may signal. Its SIGHUP starts at the default
    disposition, as a terminal's session gives it: under ``nohup`` (a CI runner started that
    way) the child would inherit SIGHUP ignored and, by design, keep ignoring it."""
    exe = Path(sys.executable).with_name("edgeforge")
    env = dict(os.environ, COLUMNS="160")
    kw.setdefault("preexec_fn", _sighup_default)
    return subprocess.Popen([str(exe), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, **kw)


def runner_processes(marker: str, command: str = "bench") -> list[int]:
    """pids of on-device runner processes (running ``command``: bench, load, smoke) whose command
    line mentions ``marker``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [c.decode(errors="replace") for c in cmd]
        if any("edgeforge_runner-" in t and t.endswith(".pyz") for t in text) and command in text and any(marker in t for t in text):
            pids.append(int(entry))
    return pids
