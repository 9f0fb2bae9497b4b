"""Device health: a device whose benches keep failing is marked unhealthy and skipped.

State lives in a file beside the inventory (``devices.toml`` -> ``devices.state.json``):

.. code-block:: json

    {"schema": "edgeforge.devices-state/1",
     "devices": {"pi-lab-3": {"consecutive_failures": 3, "unhealthy": true,
                              "marked_at": "...", "last_error": "...", "last_failure_at": "...",
                              "last_success_at": "..."}}}

One bench invocation counts once per device: a failed device (unreachable after retries, lost
mid-run, runner failed, ...) adds one consecutive failure, a device whose benches all succeeded
resets the count. A device that was merely busy (leased by someone else) counts neither way.
After ``UNHEALTHY_AFTER`` consecutive failures the device is marked unhealthy; benches then
skip it (with a note) until ``edgeforge devices check NAME`` passes, which clears the mark.

Updates are read-modify-write under ``flock`` on the inventory file, and the state file is
replaced atomically (temporary file, fsync, rename). The state is advisory: a state file that
cannot be read or written is reported, never fatal to a bench.
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path

from ...errors import DeviceError, Unhealthy
from ...fsutil import write_json_atomic

STATE_SCHEMA = "edgeforge.devices-state/1"
UNHEALTHY_AFTER = 3


def state_path(inventory_path: str | os.PathLike) -> Path:
    """``devices.toml`` -> ``devices.state.json``, in the same directory."""
    p = Path(inventory_path)
    return p.with_name(p.stem + ".state.json")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class HealthStore:
    def __init__(self, inventory_path: str | os.PathLike, threshold: int = UNHEALTHY_AFTER):
        self.inventory_path = Path(inventory_path)
        self.path = state_path(inventory_path)
        self.threshold = max(1, int(threshold))
        self.warnings: list[str] = []

    # ------------------------------------------------------------ file

    def read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            self.warnings.append(f"cannot read {self.path} ({exc}); treating every device as healthy")
            return {}
        if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA or not isinstance(data.get("devices"), dict):
            self.warnings.append(f"{self.path} is not an {STATE_SCHEMA} file; ignoring it")
            return {}
        return data["devices"]

    def _write(self, devices: dict) -> None:
        write_json_atomic(self.path, {"schema": STATE_SCHEMA, "devices": {k: devices[k] for k in sorted(devices)}})

    @contextmanager
    def _locked(self):
        fd = None
        try:
            fd = os.open(self.inventory_path, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            fd = None                      # no lock (odd filesystem): still correct for one process
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)

    def _update(self, name: str, change) -> dict | None:
        try:
            with self._locked():
                devices = self.read()
                entry = dict(devices.get(name) or {})
                entry = change(entry)
                if entry:
                    devices[name] = entry
                else:
                    devices.pop(name, None)
                self._write(devices)
                return entry
        except OSError as exc:
            self.warnings.append(f"cannot update {self.path}: {exc.strerror or exc}")
            return None

    # ------------------------------------------------------------ queries and updates

    def get(self, name: str) -> dict:
        return dict(self.read().get(name) or {})

    def unhealthy(self, name: str) -> dict | None:
        entry = self.get(name)
        return entry if entry.get("unhealthy") else None

    def record_success(self, name: str) -> None:
        def change(e):
            e.update(consecutive_failures=0, unhealthy=False, last_success_at=_now())
            e.pop("marked_at", None)
            return e
        self._update(name, change)

    def record_failure(self, name: str, error: str) -> dict | None:
        """Count one failure; returns the entry (``unhealthy`` True once the threshold is hit)."""
        def change(e):
            n = int(e.get("consecutive_failures") or 0) + 1
            e.update(consecutive_failures=n, last_error=error, last_failure_at=_now())
            if n >= self.threshold and not e.get("unhealthy"):
                e.update(unhealthy=True, marked_at=_now())
            return e
        return self._update(name, change)

    def clear(self, name: str) -> bool:
        """Clear the mark and the count (after ``devices check`` passed). Returns whether it was marked."""
        was = bool(self.unhealthy(name))
        if self.get(name):
            def change(e):
                e.update(consecutive_failures=0, unhealthy=False, cleared_at=_now())
                e.pop("marked_at", None)
                return e
            self._update(name, change)
        return was


def skip_note(name: str, entry: dict) -> str:
    return (f"marked unhealthy since {entry.get('marked_at', '?')} after {entry.get('consecutive_failures', '?')} "
            f"consecutive failed benches (last: {entry.get('last_error', '?')}); "
            f"`edgeforge devices check {name}` clears the mark")


def guarded(inventory_path, name: str, fn, *, enabled: bool = True, store=None):
    """Run ``fn()`` (a device's benches) under the device's health record: refuse an unhealthy
    device, count a DeviceError that ``counts_against_health`` as a failure and a return as a
    success. Any other exception counts neither way: a bad build
    (:class:`~edgeforge.errors.BuildInvalid`, exit 2), a bad flag, an interrupt are not the
    device's fault."""
    if not enabled:
        return fn()
    store = store or HealthStore(inventory_path)
    entry = store.unhealthy(name)
    if entry:
        raise Unhealthy(name, f"skipped: {skip_note(name, entry)}")
    try:
        out = fn()
    except DeviceError as exc:
        if not exc.counts_against_health:
            raise
        entry = store.record_failure(name, exc.detail)
        if entry and entry.get("unhealthy") and entry.get("consecutive_failures") == store.threshold:
            raise exc.restate(f"{exc.detail}; now marked unhealthy after "
                              f"{store.threshold} consecutive failed benches",
                              hint=(f"{exc.hint}; " if exc.hint else "")
                                   + f"`edgeforge devices check {name}` clears the mark") from None
        raise
    store.record_success(name)
    return out

