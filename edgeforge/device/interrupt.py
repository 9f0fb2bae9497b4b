"""Ctrl-C during a bench: stop the runner on the device within seconds, keep what it measured.

While the runner runs, SIGINT does not raise (fabric would then wait for the remote command's
output streams to close, i.e. for the whole run). The first Ctrl-C instead sends SIGTERM to the
runner's pid (its ``start`` event; the same pid as the lease's ``runner.json``) over a second
channel, then SIGKILL and a closed connection if it does not end. The runner reports the
samples measured so far and exits; the bench writes them as an ``-incomplete`` result, releases
the lease, and exits 130 (:class:`edgeforge.errors.Interrupted`). A second Ctrl-C raises
KeyboardInterrupt at once.
"""
from __future__ import annotations

import signal
import threading
import time
from typing import Callable

from ..errors import DeviceError, Interrupted

TERM_GRACE_S = 3.0      # SIGTERM, then SIGKILL after this long
KILL_GRACE_S = 2.0      # then the connection is closed


class StopOnSigint:
    """A context manager around a remote run. ``stop(done)`` is called in a thread on the first
    SIGINT (``done``: an Event set when the run returned). Outside the main thread it does
    nothing (signals reach only the main thread)."""

    def __init__(self, stop: Callable[[threading.Event], None]):
        self.stop = stop
        self.requested_at: float | None = None
        self.done = threading.Event()
        self._previous = None

    def __enter__(self) -> "StopOnSigint":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def _on_sigint(self, signum, frame) -> None:
        if self.requested_at is not None:
            raise KeyboardInterrupt
        self.requested_at = time.monotonic()
        threading.Thread(target=self.stop, args=(self.done,), daemon=True).start()

    def __exit__(self, *exc) -> None:
        self.done.set()
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def stop_runner(bench, tr, done: threading.Event) -> None:
    """SIGTERM to the runner on the device (waiting for its pid if it has not started), then
    SIGKILL, then close the connection, until the remote run returns (``done``)."""
    deadline = time.monotonic() + 30
    while not done.is_set() and time.monotonic() < deadline:
        start = bench.partial.first("start")
        if start:
            break
        time.sleep(0.05)
    start = bench.partial.first("start")
    for sig, grace in (("TERM", TERM_GRACE_S), ("KILL", KILL_GRACE_S)):
        if done.is_set():
            return
        if start and tr.is_connected():
            try:
                tr.run(["kill", f"-{sig}", str(int(start["pid"]))], timeout=10,
                       doing="stopping the runner")
            except DeviceError:
                pass
        if done.wait(grace):
            return
    tr.close()


def interrupted(bench) -> Interrupted:
    """The error to raise after a stopped run, with the samples so far written as an
    ``-incomplete`` result (the hint names it)."""
    lat = bench.partial.first("latency") or {}
    n = len(lat.get("samples_ms") or [])
    what = f"interrupted (Ctrl-C) after {n} of {bench.settings.runs} timed runs"
    if not n:
        return Interrupted(f"bench on {bench.device.name} {what}", hint="nothing was measured")
    try:
        path = bench.write(bench.result("incomplete", what))
    except Exception as exc:  # noqa: BLE001 - the interrupt is the story; say why nothing was kept
        return Interrupted(f"bench on {bench.device.name} {what}",
                           hint=f"the samples could not be written: {exc}")
    return Interrupted(f"bench on {bench.device.name} {what}",
                       hint=f"the samples measured so far are in {path}")
