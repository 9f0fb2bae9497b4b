"""A signal during a device run: stop the runner on the device within seconds, keep what it
measured.

SIGINT (Ctrl-C), SIGTERM (``timeout``, a CI cancel, systemd) and SIGHUP (a closed terminal) are
handled alike. While the runner runs, they do not raise (fabric would then wait for the remote
command's output streams to close, i.e. for the whole run). The first one instead sends SIGTERM
to the runner's pid (its ``start`` event; the same pid as the lease's ``runner.json``) over a
second channel, then SIGKILL and a closed connection if it does not end. The runner reports the
samples measured so far and exits; the run writes them as an ``-incomplete`` result, releases
the lease, and exits 130 (:class:`edgeforge.errors.Interrupted`). A second signal raises
KeyboardInterrupt (:class:`edgeforge.errors.Stopped`) at once. A signal the process ignores
(``nohup``: SIGHUP) stays ignored.

Outside a device run, ``edgeforge.cli.main`` turns SIGTERM and SIGHUP into
:class:`~edgeforge.errors.Stopped`, KeyboardInterrupt's path: exit 130, one line.
"""
from __future__ import annotations

import signal
import threading
import time
from typing import Callable

from ...errors import DeviceError, Interrupted, Stopped, signal_name

TERM_GRACE_S = 3.0      # SIGTERM, then SIGKILL after this long
KILL_GRACE_S = 2.0      # then the connection is closed
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


def signal_label(signum: int | None) -> str:
    """How an interrupted message names the signal: ``SIGINT, Ctrl-C``, ``SIGTERM``."""
    if signum is None:
        return "a signal"
    name = signal_name(signum)
    return f"{name}, Ctrl-C" if signum == signal.SIGINT else name


class StopOnSignal:
    """A context manager around a remote run. ``stop(done)`` is called in a thread on the first
    of SIGINT, SIGTERM or SIGHUP (``done``: an Event set when the run returned); ``signum`` is
    that signal. Outside the main thread it does nothing (signals reach only the main thread)."""

    def __init__(self, stop: Callable[[threading.Event], None]):
        self.stop = stop
        self.requested_at: float | None = None
        self.signum: int | None = None
        self.done = threading.Event()
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                if signal.getsignal(sig) is signal.SIG_IGN:
                    continue            # nohup and friends: the user asked for it to be ignored
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum, frame) -> None:
        if self.requested_at is not None:
            raise Stopped(signum)
        self.requested_at = time.monotonic()
        self.signum = signum
        threading.Thread(target=self.stop, args=(self.done,), daemon=True).start()

    def __exit__(self, *exc) -> None:
        self.done.set()
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


StopOnSigint = StopOnSignal     # the name before SIGTERM and SIGHUP were handled too


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


def interrupted(bench, signum: int | None = None) -> Interrupted:
    """The error to raise after a stopped run (``signum``: the signal that stopped it), with
    what was measured so far written as an ``-incomplete`` result (the hint names it).
    ``bench.progress()`` says how far the run got, ``bench.measured()`` whether to keep it."""
    what = f"interrupted ({signal_label(signum)}) {bench.progress()}"
    head = f"{bench.command} on {bench.device.name} {what}"
    if not bench.measured():
        return Interrupted(head, hint="nothing was measured")
    try:
        path = bench.write(bench.result("incomplete", what))
    except Exception as exc:  # noqa: BLE001 - the interrupt is the story; say why nothing was kept
        return Interrupted(head, hint=f"what was measured could not be written: {exc}")
    return Interrupted(head, hint=f"what was measured so far is in {path}")


def after_the_run(command: str, device: str, signum: int | None, path) -> Interrupted:
    """A stop signal once the run had finished and its result was written (the lease released):
    exit 130 naming the result, which is whole."""
    return Interrupted(f"{command} on {device} interrupted ({signal_label(signum)}) after the run",
                       hint=f"the run had finished: its result is in {path}")
