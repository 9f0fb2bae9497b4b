"""What a deploy does when it is cut short: a lost connection, a failure, a signal.

- **Read back, never assume.** After a failure the deploy reads ``current`` (and the history)
  from the device: on the same connection if it still stands, else on a new one (the connect
  retries). Its own release is removed there unless it is current (or went live once). When
  the device cannot be read back and a switch was sent, the record says ``unknown``; the next
  ``edgeforge releases`` / ``deploy`` of that name reads the device and reports the difference
  with that record (:func:`last_record_note`).
- **A switch whose health check did not run** is :class:`HealthUnchecked`: status
  ``switched, health unchecked``, exit 4, with a hint to roll back or deploy again.
- **Signals.** :class:`StopRequest` turns the first SIGINT, SIGTERM or SIGHUP during a deploy
  into a request that each device's deploy honours at its next step boundary (a switch in
  flight is never cut in half; a smoke test or health check in flight is stopped on the
  device). The device is then read back, the lease released, the record written: status
  ``interrupted``, exit 130. A second signal raises KeyboardInterrupt at once.
- **A test hook:** ``EDGEFORGE_DEPLOY_PAUSE=POINT:FILE`` makes the deploy create FILE when it
  reaches POINT (``upload``, ``smoke``, ``switch``, ``health``, ``health-running``) and wait
  (at most :data:`PAUSE_MAX_S`) until FILE is removed, so a test can kill the device or send a
  signal at an exact step.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

from ...errors import DeviceError, EdgeforgeError, Interrupted

PAUSE_ENV = "EDGEFORGE_DEPLOY_PAUSE"
PAUSE_MAX_S = 120.0
SIGNALS = tuple(getattr(signal, s) for s in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, s))


class HealthUnchecked(DeviceError):
    """``current`` was switched to the new release but its health check could not run (or
    finish): the release is live and unchecked."""


class StateUnknown(DeviceError):
    """The connection was lost after a switch was sent and the device could not be read back:
    where ``current`` points is unknown."""


class DeployStopped(Interrupted):
    """A signal stopped the deploy of one device at a step boundary."""


def detail(exc: BaseException) -> str:
    return getattr(exc, "detail", None) or getattr(exc, "message", None) or str(exc)


def pause_at(point: str) -> None:
    """The test hook of the module doc (a no-op unless ``$EDGEFORGE_DEPLOY_PAUSE`` names POINT)."""
    spec = os.environ.get(PAUSE_ENV, "")
    want, sep, path = spec.partition(":")
    if not sep or want != point or not path:
        return
    p = Path(path)
    try:
        p.write_text(f"{os.getpid()} {point}\n")
    except OSError:
        return
    deadline = time.monotonic() + PAUSE_MAX_S
    while p.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


class StopRequest:
    """The first SIGINT/SIGTERM/SIGHUP while active (main thread only) sets ``signal_name`` and
    runs the registered callbacks in a thread; a second one raises KeyboardInterrupt."""

    def __init__(self):
        self.signal_name: str | None = None
        self._callbacks: dict[int, object] = {}
        self._lock = threading.Lock()
        self._previous: dict[int, object] = {}
        self._n = 0

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                if signal.getsignal(s) is not signal.SIG_IGN:     # nohup: stays ignored
                    self._previous[s] = signal.signal(s, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous.clear()

    def _on_signal(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.request(signal.Signals(signum).name)

    def request(self, name: str) -> None:
        with self._lock:
            if self.signal_name is not None:
                return
            self.signal_name = name
            callbacks = list(self._callbacks.values())
        for cb in callbacks:
            threading.Thread(target=cb, daemon=True, name="edgeforge-deploy-stop").start()

    def on_request(self, cb) -> int:
        """Call ``cb()`` (in a thread) when a stop is requested, at once if it already was;
        returns a key for :meth:`forget`."""
        with self._lock:
            self._n += 1
            key = self._n
            self._callbacks[key] = cb
            now = self.signal_name is not None
        if now:
            threading.Thread(target=cb, daemon=True, name="edgeforge-deploy-stop").start()
        return key

    def forget(self, key: int) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    def check(self, device: str, where: str) -> None:
        """Raise :class:`DeployStopped` when a stop was requested (called at step boundaries)."""
        if self.requested:
            raise DeployStopped(f"device {device}: interrupted ({self.signal_name}) {where}")


def kill_on_stop(stop: StopRequest | None, tr, pid: int) -> int | None:
    """Register: on a stop request, SIGTERM the runner ``pid`` on the device behind ``tr``."""
    if stop is None:
        return None

    def kill():
        if tr.is_connected():
            try:
                tr.run(["kill", "-TERM", str(int(pid))], timeout=10, doing="stopping the smoke test")
            except (DeviceError, OSError):
                pass
    return stop.on_request(kill)


# ---------------------------------------------------------------- reading the device back

def settle(store, entry) -> None:
    """Read ``current`` back from the device into ``entry``; remove the deploy's own release
    (``entry.release``) unless it is current or went live once (a switch-back keeps it)."""
    st = store.state(history=200)
    entry.current, entry.verified, entry.read_back = st.current, True, True
    rid = entry.release
    rel = st.release(rid) if rid else None
    if rel is None or st.current == rid:
        return
    went_live = any(h.get("to") == rid for h in st.history)
    if rel["sealed"] and went_live:
        return
    try:
        store.remove(rid)
        entry.notes.append(f"removed its release {rid}: it never became current")
    except (DeviceError, OSError) as exc:
        entry.notes.append(f"could not remove {rid} ({detail(exc)}); the next deploy sweeps it")


def read_back(session, store_of, entry) -> str | None:
    """Settle ``entry`` on a new connection (``session.connect()``, with its retries; no
    lease: the deploy's own was released or lost); the reason it could not, or None."""
    entry.read_back = False
    try:
        tr = session.connect()
    except DeviceError as exc:
        return detail(exc)
    try:
        settle(store_of(tr), entry)
        return None
    except DeviceError as exc:
        return detail(exc)
    finally:
        tr.close()


def outcome(dev: str, name: str, entry, exc: BaseException) -> BaseException:
    """The error a device's deploy ends with, once the device was read back (or not):
    ``exc``, or what the device's state makes of it (``entry.current`` becomes None when it is
    unknown)."""
    rid, cur = entry.release, entry.current
    live_unchecked = bool(rid) and entry.verified and cur == rid and not (entry.health or {}).get("passed")
    back = f"`edgeforge rollback {name} --device {dev}` switches back to {entry.from_ or 'no release'}"
    if isinstance(exc, Interrupted):
        what = exc.message if isinstance(exc, DeployStopped) else f"device {dev}: interrupted"
        if not entry.verified:
            entry.current = None
            state = "current is unknown (a switch was in flight; not read back)"
        else:
            state = f"current is {cur or 'none'} (" + ("read back" if entry.read_back is not False
                                                      else "as the device last answered; not read back") + ")"
        if live_unchecked:
            return Interrupted(f"{what}; {state}: switched, its health check did not run", hint=back)
        return Interrupted(f"{what}; {state}", hint=exc.hint)
    if not isinstance(exc, EdgeforgeError):
        return exc
    if live_unchecked:
        how = "not read back: as the switch answered" if entry.read_back is False else "read back"
        return HealthUnchecked(dev, f"current is {rid} ({how}), but its health check could not run: "
                               f"{detail(exc)}", hint=f"{back}; deploying the build again re-runs the checks")
    if not entry.verified:
        entry.current = None
        return StateUnknown(dev, f"{detail(exc)}; a switch to {rid} was sent and current could not be read back",
                            hint=f"`edgeforge releases {name} --device {dev}` reads it from the device")
    return exc


# ---------------------------------------------------------------- the next command verifies

def last_record_note(results_dir, name: str, device: str, current: str | None) -> str | None:
    """When the newest deploy/rollback record of ``name`` in ``results_dir`` could not read
    ``device`` back (status unknown, or ``read_back`` false) and the device's ``current``
    differs from it: a note saying so."""
    from ...errors import ResultError
    from ...results.deploy import DeployRecord, record_filename_suffix

    d = Path(results_dir)
    try:
        files = sorted(d.glob(f"*{record_filename_suffix(name)}"))
    except OSError:
        return None
    newest = None
    for f in files:
        try:
            rec = DeployRecord.check(json.loads(f.read_text()), str(f))
        except (OSError, ValueError, ResultError):
            continue        # not a record this edgeforge reads: it says nothing about the device
        if rec.name != name:
            continue
        e = next((e for e in rec.devices if e.device == device), None)
        if e is not None and e.status not in ("not deployed", "busy", "skipped"):
            if newest is None or rec.created_at >= newest[0].created_at:
                newest = (rec, e, f)
    if newest is None:
        return None
    rec, e, f = newest
    if e.read_back is not False and e.status != "unknown":
        return None
    said = "unknown" if e.status == "unknown" else (e.current or "none")
    if said != "unknown" and said == (current or "none"):
        return None
    return (f"the last {rec.action} record ({f}) has current {said} for {device}, not read back; "
            f"the device has {current or 'none'}")
