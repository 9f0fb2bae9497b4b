"""A lease on a device, held on the device itself: one bench at a time per device, whichever
machine the edgeforge process runs on.

The lease is the directory ``<workdir>/.lease`` holding ``owner.json`` (host, boot id, pid, user,
token, what runs, TTL, acquired/renewed times on the *device's* clock) and, once the runner has
started, ``runner.json`` (the runner's pid on the device). Every change to it is made by a small
standard-library script run over SSH that first takes ``flock`` on ``<workdir>/.lease.lock``, so
checking and taking (or breaking) the lease is atomic among all contenders; the lock is held
only for the length of that script, never for the bench.

A lease is stale, and may be broken, when no runner it started is still alive on the device and

- it was last renewed longer ago than its TTL (the holder's command timeout + a margin; the
  holder renews it before every upload and before the run), measured on the device's clock; or
- its holder ran on this machine (same hostname and boot id) and that process is gone; or
- it is this process's own lease from a bench that lost its connection (token not in use).

Breaking names the token it expects; a lease taken over in the meantime is not broken.
"""
from __future__ import annotations

import datetime as _dt
import getpass
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from ...runner import remote
from ...errors import (Busy, ConnectionLost, DeviceError, LeaseLost, Misconfigured, RunnerCrashed, RunnerTimeout,
                      RuntimeMissing)
from .process import pid_alive
from .transport import SSHTransport

LEASE_PREFIX = "@@edgeforge-lease "
TTL_MARGIN_S = 60.0
POLL_MIN_S, POLL_MAX_S = 0.25, 2.0
SCRIPT_TIMEOUT_S = 60.0


# Tokens of leases this process holds now; a lease with our pid and another token was abandoned.
_ACTIVE: set[str] = set()
_ACTIVE_LOCK = threading.Lock()


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="microseconds")


def describe_holder(holder: dict, age_s: float | None = None) -> str:
    who = f"{holder.get('user') or '?'}@{holder.get('host') or '?'} pid {holder.get('pid', '?')}"
    what = f" ({holder['what']})" if holder.get("what") else ""
    age = f" for {age_s:.0f}s" if age_s is not None else ""
    return f"{who}{what}{age}"


@dataclass
class Lease:
    """The lease one bench holds on one device. ``acquire`` first; ``release`` always."""

    tr: SSHTransport
    ttl_s: float
    wait_s: float = 0.0
    what: str = ""
    on_step: Callable[[str, str], None] = lambda step, msg: None
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    acquired_at: float | None = None       # device clock
    released_at: float | None = None
    waited_s: float = 0.0
    broke: dict | None = None              # the stale lease this one replaced, and why it was stale
    held: bool = False
    _reason: str = ""

    @property
    def device(self):
        return self.tr.device

    def owner(self) -> dict:
        return {"token": self.token, "host": socket.gethostname(), "boot_id": boot_id(), "pid": os.getpid(),
                "user": getpass.getuser(), "what": self.what, "ttl_s": self.ttl_s}

    def _call(self, op: str, **extra) -> dict:
        req = {"op": op, "workdir": self.device.workdir, "token": self.token, **extra}
        r = self.tr.python(["-c", remote.script("lease"), json.dumps(req)], timeout=SCRIPT_TIMEOUT_S,
                           doing=f"{'taking' if op == 'acquire' else op + 'ing'} the device lease")
        if r.connection_lost:
            raise ConnectionLost(self.device.name, f"connection to {self.device.address} lost while handling the lease")
        if r.timed_out:
            raise RunnerTimeout(self.device.name, f"lease script timed out after {SCRIPT_TIMEOUT_S:g}s")
        line = next((ln for ln in r.stdout.splitlines() if ln.startswith(LEASE_PREFIX)), None)
        if line is None:
            if r.exit_code == 127:
                raise RuntimeMissing(self.device.name, f"python '{self.device.python}' not found on the device",
                                  hint="set python = ... in devices.toml to a Python 3 with numpy and the runtime")
            tail = (r.stderr.strip().splitlines() or ["no output"])[-1][:300]
            raise RunnerCrashed(self.device.name, f"lease script failed (exit {r.exit_code}): {tail}")
        out = json.loads(line[len(LEASE_PREFIX):])
        if out.get("status") == "error":
            raise Misconfigured(self.device.name, f"cannot take the lease in {self.device.workdir}: {out.get('error')}",
                              hint="set workdir = ... in devices.toml to a directory the user can write")
        return out

    def stale_reason(self, holder: dict, age_s: float, runner_pid) -> str | None:
        """Why a lease held by ``holder`` may be broken, or None when it is live."""
        if runner_pid:
            return None                      # its runner still runs: never overlap with it
        ttl = holder.get("ttl_s")
        ttl = float(ttl) if isinstance(ttl, (int, float)) and ttl > 0 else self.ttl_s
        if age_s > ttl:
            return f"not renewed for {age_s:.0f}s, over its TTL of {ttl:.0f}s"
        pid = holder.get("pid")
        same_machine = holder.get("host") == socket.gethostname() and holder.get("boot_id") == boot_id()
        if same_machine and isinstance(pid, int):
            if pid == os.getpid():
                with _ACTIVE_LOCK:
                    if holder.get("token") not in _ACTIVE:
                        return "left by an earlier bench of this process that lost its connection"
            elif not pid_alive(pid):
                return f"its owner (pid {pid} on this machine) is gone"
        return None

    def acquire(self) -> "Lease":
        start = time.monotonic()
        poll = POLL_MIN_S
        brk = None
        announced = False
        while True:
            out = self._call("acquire", owner=self.owner(), **({"break": brk} if brk else {}))
            if out.get("broke"):
                self.broke = {"holder": out["broke"], "reason": self._reason}
                self.on_step("lease", f"broke a stale lease of {describe_holder(out['broke'])}: {self._reason}")
            if out["status"] == "acquired":
                with _ACTIVE_LOCK:
                    _ACTIVE.add(self.token)
                self.held = True
                self.acquired_at = out["now"]
                self.waited_s = round(time.monotonic() - start, 3)
                return self
            holder, age, runner = out.get("holder") or {}, float(out.get("age_s") or 0.0), out.get("runner_pid")
            reason = self.stale_reason(holder, age, runner)
            if reason and holder.get("token") and brk != holder.get("token"):
                brk, self._reason = holder["token"], reason
                continue
            brk = None
            waited = time.monotonic() - start
            if waited >= self.wait_s:
                busy = describe_holder(holder, age) + (f", runner pid {runner} on the device" if runner else "")
                if self.wait_s > 0:
                    raise Busy(self.device.name, f"busy: still leased after waiting {waited:.0f}s, by {busy}",
                                     hint="raise --wait, or try again later")
                raise Busy(self.device.name, f"busy: leased by {busy}",
                                 hint="pass --wait SECONDS to wait for it")
            if not announced:
                self.on_step("lease", f"waiting for {describe_holder(holder, age)} (up to {self.wait_s:g}s)")
                announced = True
            time.sleep(min(poll, max(0.05, self.wait_s - waited)))
            poll = min(poll * 2, POLL_MAX_S)

    def renew(self) -> None:
        if not self.held:
            return
        out = self._call("renew")
        if out["status"] == "lost":
            self.held = False
            holder = out.get("holder") or {}
            raise LeaseLost(self.device.name, "lost the device lease"
                              + (f" to {describe_holder(holder)}" if holder else "")
                              + " (it was broken as stale)", hint="raise --timeout so the lease TTL covers the bench")

    def release(self) -> bool:
        """Give the lease back. Never raises; False when it could not be (the connection is gone:
        the lease then expires as described in the module doc)."""
        if not self.held:
            return False
        try:
            if not self.tr.is_connected():
                return False
            out = self._call("release")
            self.released_at = out.get("now")
            return out["status"] == "released"
        except (DeviceError, OSError):
            return False
        finally:
            self.held = False
            with _ACTIVE_LOCK:
                _ACTIVE.discard(self.token)

    def record(self) -> dict:
        return {"token": self.token, "acquired_at": iso(self.acquired_at), "released_at": iso(self.released_at),
                "waited_s": self.waited_s, "ttl_s": self.ttl_s, "broke": self.broke}


def lease_ttl(command_timeout_s: float) -> float:
    """TTL of a lease: the holder's command timeout, plus the runner's grace, plus a margin."""
    return float(command_timeout_s) + TTL_MARGIN_S
