"""Releases of one model on one device: the on-device layout (docs/deploy.md draws it:
``<workdir>/deploy/<NAME>/{current -> releases/<id>, releases/, history.jsonl, .lock}``) and the
script that changes it.

A release id is ``<UTC time>-<artifact sha256[:12]>`` (``20261201T151300Z-a4a9de2b3b0e``), so
ids sort in deploy order. Every change runs ``runner/remote/releases.py`` (standard library only) on
the device under ``flock`` on ``.lock``:

- ``state``: the releases (sealed or incomplete), where ``current`` points, the release before
  it (the one the switch to current came from, if still there and sealed; else the newest sealed
  release older than current; ``rollback`` goes there by default), the history;
- ``link``: files another release (or a bench directory) already holds, by sha256, are linked or
  copied instead of uploaded;
- ``seal``: check every file's sha256 and write ``release.json``: only a sealed release may
  become current;
- ``switch``: check the files against ``release.json`` again, rename a new symlink over
  ``current`` (rename(2)), fsync the directory, append the history line; ``expect`` makes it a
  compare-and-swap;
- ``prune``: keep the newest N sealed releases, never ``current`` nor the one before it;
- ``sweep``: remove incomplete releases that are not current; ``remove``: drop one release that
  is not current (a failed deploy's own).
"""
from __future__ import annotations

import datetime as _dt
import getpass
import json
import re
import socket
from dataclasses import dataclass, field

from ...runner import remote
from ...errors import (ConfigError, ConnectionLost, DeviceError, DigestMismatch, Misconfigured, ReleaseRefused, RunnerCrashed, RunnerTimeout,
                      RuntimeMissing, SmokeFailed)
from ..link.events import Partial, tail
from ..link.lease import Lease
from ..link.settings import runner_file
from ..link.transport import SSHTransport

RELEASES_PREFIX = "@@edgeforge-releases "
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ID_RE = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{12}(-\d+)?$")
SCRIPT_TIMEOUT_S = 120.0
HISTORY_SHOWN = 50



NAME_HINT_DEPLOY = "pass --as NAME"
NAME_HINT_EXISTING = "give the NAME it was deployed as (`edgeforge deploy ... --as NAME`)"


def check_name(name: str, hint: str = NAME_HINT_EXISTING) -> str:
    """A release name: letters, digits, ``_ . -``, not starting with ``.`` or ``-`` (so never
    ``..``, a ``/`` or a shell character). Exit 2 otherwise; ``hint``: what the caller can do."""
    if not isinstance(name, str) or not NAME_RE.match(name) or ".." in name:
        raise ConfigError(f"release name {name!r} is not allowed: use letters, digits, '_', '.' and '-' "
                          "(64 at most, starting with a letter or digit, no '..')", hint=hint)
    return name


def check_id(release_id: str) -> str:
    if not ID_RE.match(release_id or ""):
        raise ConfigError(f"release id {release_id!r} is not an id edgeforge makes (YYYYmmddTHHMMSSZ-<sha12>)",
                          hint="`edgeforge releases NAME --device D` lists them")
    return release_id


def new_release_id(digest: str, taken=()) -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    rid, n = f"{stamp}-{digest[:12]}", 1
    while rid in set(taken):
        n += 1
        rid = f"{stamp}-{digest[:12]}-{n}"
    return rid


def operator() -> dict:
    """Who is switching: the user and the machine edgeforge runs on."""
    return {"user": getpass.getuser(), "host": socket.gethostname()}


@dataclass
class State:
    """What ``state`` read: releases (oldest first), current, the one before it, the history."""
    releases: list[dict] = field(default_factory=list)
    current: str | None = None
    current_exists: bool | None = None
    previous: str | None = None
    history: list[dict] = field(default_factory=list)
    record_note: str | None = None      # set by list_releases: the last record disagrees

    @property
    def ids(self) -> list[str]:
        return [r["id"] for r in self.releases]

    def release(self, release_id: str) -> dict | None:
        return next((r for r in self.releases if r["id"] == release_id), None)

    @property
    def broken(self) -> str | None:
        """A note when ``current`` points at a release that is not there (never repaired silently)."""
        if self.current and not self.current_exists:
            return f"current points at release {self.current}, which is missing or incomplete on the device"
        return None

    def to_dict(self) -> dict:
        return {"current": self.current, "current_exists": self.current_exists, "previous": self.previous,
                "releases": [{k: r.get(k) for k in ("id", "sealed", "digest", "sealed_at", "model")}
                             for r in self.releases],
                "history": self.history, "last_record": self.record_note}


class Releases:
    """The releases of ``name`` on the device behind ``tr``."""

    def __init__(self, tr: SSHTransport, name: str, timeout_s: float = SCRIPT_TIMEOUT_S):
        self.tr = tr
        self.name = check_name(name)
        self.timeout_s = min(float(timeout_s), SCRIPT_TIMEOUT_S)

    @property
    def device(self):
        return self.tr.device

    def subdir(self, release_id: str | None = None) -> str:
        """Under the workdir: the release's directory, or (None) ``current``."""
        return f"deploy/{self.name}/" + (f"releases/{release_id}" if release_id else "current")

    def path(self, release_id: str | None = None) -> str:
        return f"{self.device.workdir}/{self.subdir(release_id)}"

    def call(self, op: str, **extra) -> dict:
        req = {"op": op, "workdir": self.device.workdir, "name": self.name, **extra}
        doing = f"{op} of the releases of {self.name}"
        r = self.tr.python(["-c", remote.script("releases"), json.dumps(req)], timeout=self.timeout_s, doing=doing)
        dev = self.device.name
        if r.connection_lost:
            raise ConnectionLost(dev, f"connection to {self.device.address} lost during the {doing}")
        if r.timed_out:
            raise RunnerTimeout(dev, f"the {doing} timed out after {self.timeout_s:g}s")
        line = next((ln for ln in r.stdout.splitlines() if ln.startswith(RELEASES_PREFIX)), None)
        if line is None:
            tail = (r.stderr.strip().splitlines() or ["no output"])[-1][:300]
            raise RunnerCrashed(dev, f"release script failed (exit {r.exit_code}): {tail}")
        out = json.loads(line[len(RELEASES_PREFIX):])
        if out.get("status") == "error":
            if out.get("kind") == "digest":
                raise DigestMismatch(dev, f"{self.name}: {out['message']}",
                                     hint="the files changed on the device; deploy the build again")
            if out.get("kind") == "layout":
                raise Misconfigured(dev, f"{self.name}: {out['message']}",
                                    hint="set workdir = ... in devices.toml to a directory the user can write")
            raise ReleaseRefused(dev, f"{self.name}: {out['message']}")
        return out

    def state(self, history: int = HISTORY_SHOWN) -> State:
        out = self.call("state", history=history)
        return State(out["releases"], out["current"], out["current_exists"], out["previous"], out["history"])

    def link(self, release_id: str, files: dict[str, str], also=()) -> list[str]:
        return self.call("link", id=release_id, files=files, also=list(also))["linked"]

    def seal(self, release_id: str, files: dict[str, str], meta: dict) -> None:
        self.call("seal", id=release_id, files=files, meta=meta)

    def switch(self, to: str | None, *, expect: str | None, reason: str, action: str) -> dict:
        """Point ``current`` at ``to`` (None: remove it) if it still points at ``expect``."""
        return self.call("switch", to=to, expect=expect, record={**operator(), "reason": reason,
                                                                 "action": action})

    def prune(self, keep: int, protect=()) -> list[str]:
        return self.call("prune", keep=int(keep), protect=list(protect))["removed"]

    def sweep(self, protect=()) -> list[str]:
        """Remove the incomplete (unsealed) releases that are not current: left by a deploy
        that failed. Only under the device's lease (nobody else is uploading)."""
        return self.call("sweep", protect=list(protect))["removed"]

    def remove(self, release_id: str) -> None:
        self.call("remove", id=release_id)


# ---------------------------------------------------------------- the smoke test

def run_smoke(tr, remote_dir: str, files: dict[str, str], timeout_s: float, lease: Lease | None,
              on_step, stop=None) -> dict:
    """The runner's smoke test of ``remote_dir`` (a release, or ``current``); returns its
    ``smoke`` event. Raises SmokeFailed for drift over budget, DeviceError for the rest.
    ``stop`` (a :class:`.deploy_safety.StopRequest`): a stop request ends the runner on the
    device and raises :class:`.deploy_safety.DeployStopped`."""
    from .deploy_safety import kill_on_stop

    dev = tr.device
    keys = []
    spec = {"files": files, "deadline_s": timeout_s + 5.0,
            "lease": ({"dir": f"{dev.workdir}/.lease", "token": lease.token} if lease is not None else None)}
    partial = Partial()

    def on_line(line):
        ev = partial.feed(line)
        if ev and ev["event"] == "start" and isinstance(ev.get("pid"), int):
            keys.append(kill_on_stop(stop, tr, ev["pid"]))
        if ev and ev["event"] in ("files", "runtime"):
            on_step("smoke", "sha256 checked" if ev["event"] == "files"
                    else f"{ev.get('name')} {ev.get('version')}: reference inputs")

    try:
        r = tr.run([dev.python, f"{remote_dir}/{runner_file(files)}", "smoke", remote_dir, "--spec", json.dumps(spec)],
                   timeout=timeout_s, on_line=on_line, doing="running the smoke test")
    except DeviceError:
        if stop is not None:
            stop.check(dev.name, "during the smoke test")
        raise
    finally:
        for k in keys:
            if k is not None:
                stop.forget(k)
    if stop is not None:
        stop.check(dev.name, "during the smoke test")
    if not partial.events:
        for line in r.stdout.splitlines():
            partial.feed(line)
    if r.connection_lost:
        raise ConnectionLost(dev.name, f"connection to {dev.address} lost during the smoke test")
    if r.timed_out:
        raise RunnerTimeout(dev.name, f"smoke test timed out after {timeout_s:g}s", hint="raise --timeout")
    err, smoke = partial.first("error"), partial.first("smoke")
    if err:
        if err.get("kind") == "digest":
            raise DigestMismatch(dev.name, f"files of the release do not match their sha256: "
                                 f"{', '.join(err.get('files', []))}", hint="deploy again to upload them")
        cls = RuntimeMissing if err.get("kind") == "runtime-missing" else RunnerCrashed
        raise cls(dev.name, f"smoke test: {err.get('message')}")
    if r.exit_code == 127:
        raise RuntimeMissing(dev.name, f"python '{dev.python}' not found on the device")
    if smoke and not smoke.get("passed"):
        raise SmokeFailed(dev.name, f"smoke test failed: {smoke.get('reason')} on {smoke.get('samples')} "
                          "reference inputs", hint="not switched in; the build does not hold its budget here")
    if r.exit_code != 0 or not smoke:
        raise RunnerCrashed(dev.name, f"smoke test exited {r.exit_code}: {tail(r.stderr) or 'no verdict'}")
    return {k: v for k, v in smoke.items() if k != "event"}
