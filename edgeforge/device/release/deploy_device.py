"""One deploy (or switch) of one release name on one device: model versions, switched atomically.

A deploy of one build to one device, under the device's lease (:mod:`.lease`):

1. read the device's releases of NAME (:mod:`.releases`); a ``current`` that points at a
   missing release is reported (a note, and ``from_missing`` in the history), never repaired;
2. upload the release by digest into ``<workdir>/deploy/NAME/releases/<id>/`` as bench sends
   a build (:func:`.sync.prepare` / :func:`.sync.upload`): files another release or a bench directory on
   the device already holds, by sha256, are linked instead of sent;
3. smoke test: the runner (``edgeforge_runner-<sha12>.pyz smoke``) checks every sha256, loads the release
   with the target's runtime, runs the reference inputs and judges the drift against the build's
   budget (the host verify's rules). A failed smoke test removes the release: exit 1;
4. seal the release (sha256 checked again, ``release.json``) and switch ``current`` to it
   (a new symlink renamed over ``current``, one history line);
5. health check through ``current`` (the smoke test again, by the symlink). If it fails, switch
   back at once, record why, and fail with exit 4;
6. prune: keep the newest N releases, never ``current`` or the release before it.

A failure before step 4 (a lost connection mid-upload or mid-smoke, a digest that does not
check out) leaves ``current`` as it was. After any failure the device is read back (on a new
connection if the old one is gone) and the deploy's own release is removed unless it went
live; a signal stops the deploy at the next step; see :mod:`.deploy_safety`. A NAME whose
releases hold another model (the manifest's ``name``) is refused without ``replace_model``.
Fleets, canaries and the verbs: :mod:`.deploy`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import ConfigError, ConnectionLost, EdgeforgeError, HealthCheckFailed, ReleaseRefused
from ...options import BenchOptions, ConnectionOptions
from ...results.deploy import DeviceEntry
from ..link import sync
from .deploy_safety import DeployStopped, StopRequest, last_record_note, outcome, pause_at, read_back, settle
from ..link.inventory import Device
from .releases import Releases, new_release_id, operator, run_smoke
from ..link.session import Session, device_timeouts
from ..link.settings import BenchSettings, build_files, resolve_settings, results_dir_of, runner_file

KEEP = 5
Step = Callable[[str, str, str], None]      # (device, step, message)


@dataclass(frozen=True)
class DeploySpec:
    """What a deploy asks beyond the bench options: the release name (default: the build's
    model name), releases kept, canary count and their gates, the reason recorded, parallelism."""

    name: str | None = None
    keep: int = KEEP
    canary: int = 0
    gates: dict = field(default_factory=dict)
    reason: str | None = None
    jobs: int | None = None
    replace_model: bool = False


@dataclass(frozen=True)
class Switch:
    """A switch of ``current``: to a release (None with action "rollback": the one before
    current; None otherwise: no release), recorded with ``reason``. ``expect``: True = whatever
    is current when read; else the release current must still be on (a canary's revert)."""

    to: str | None
    reason: str
    action: str = "rollback"
    expect: str | None | bool = True


def release_files(build_dir: Path, manifest: dict) -> dict[str, Path]:
    """What a release holds: the bench files (artifact, reference data, runner) and the manifest."""
    files = build_files(Path(build_dir), manifest)
    files["manifest.json"] = Path(build_dir) / "manifest.json"
    return files


def session(dev: Device, opts: ConnectionOptions, timeouts, what: str, on_step) -> Session:
    """The device session of a deploy or a switch (:class:`.session.Session`: connect with
    retries, the lease for the command timeout)."""
    return Session(dev, opts, connect_timeout_s=timeouts.connect_timeout_s,
                   command_timeout_s=timeouts.command_timeout_s, what=what, on_step=on_step)


def detail(exc: EdgeforgeError) -> str:
    return getattr(exc, "detail", None) or exc.message


def health_check_or_back(tr, store: Releases, entry: DeviceEntry, files, timeout_s, lease, on_step,
                         stop: StopRequest | None = None) -> None:
    """The smoke test through ``current`` after a switch to ``entry.to``; on failure switch back
    to ``entry.from_`` and raise HealthCheckFailed (exit 4). A lost connection or a stop
    request leaves current as it is (the caller reads it back)."""
    dev = tr.device
    on_step("health", f"smoke test through {store.path()}")
    try:
        entry.health = run_smoke(tr, store.path(), files, timeout_s, lease, on_step, stop)
        return
    except DeployStopped:
        raise
    except EdgeforgeError as exc:
        why = detail(exc)
    if not tr.is_connected():
        raise ConnectionLost(dev.name, f"connection lost during the health check ({why})")
    entry.switch_sent, entry.verified = True, False
    store.switch(entry.from_, expect=entry.to, reason=f"health check failed: {why}", action="switch-back")
    entry.current, entry.verified = entry.from_, True
    raise HealthCheckFailed(dev.name, f"health check through current failed ({why}); switched back to "
                            f"{entry.from_ or 'no release'}")


@dataclass(frozen=True)
class Shipment:
    """What a deploy sends to one device: the files by their path in the release, their
    sha256, the resolved settings, and the step callback."""

    files: dict[str, Path]
    digests: dict[str, str]
    settings: BenchSettings
    on_step: Callable[[str, str], None]


@dataclass
class Deployer:
    """One build to one device (steps in the module doc); fills ``entry`` as it goes."""

    build_dir: Path
    manifest: dict
    name: str
    opts: BenchOptions
    spec: DeploySpec
    on_step: Step = lambda d, s, m: None
    stop: StopRequest | None = None

    def __call__(self, dev: Device, entry: DeviceEntry) -> None:
        worker, uploads = threading.current_thread(), []

        def step(s, m):
            self.on_step(dev.name, s, m)
            if threading.current_thread() is not worker:      # a runner's output line
                if s == "smoke" and m == "sha256 checked" and entry.switch_sent:
                    pause_at("health-running")
                return
            if s == "upload":
                if not uploads:
                    uploads.append(m)
                    pause_at("upload")
                self._check(dev, "during the upload")

        settings = resolve_settings(self.manifest, dev, self.opts)
        files = release_files(self.build_dir, self.manifest)
        ship = Shipment(files, sync.local_digests(self.build_dir, self.manifest, files), settings, step)
        sha = self.manifest["artifact"]["sha256"]
        ses = session(dev, self.opts.connection, settings, f"edgeforge deploy {self.name}@{sha[:12]}", step)
        step("connect", f"{dev.name} ({dev.address})")
        try:
            with ses:
                self._on(ses.tr, ses.lease, ship, entry)
        except Exception as exc:  # noqa: BLE001 - read back, then re-raised as what the device says
            if entry.release and not entry.read_back:
                step("read back", "current and the history from the device")
                why = read_back(ses, lambda tr: Releases(tr, self.name, settings.command_timeout_s), entry)
                if why:
                    entry.notes.append(f"not read back: {why}")
            raise outcome(dev.name, self.name, entry, exc) from None

    def _check(self, dev: Device, where: str) -> None:
        if self.stop is not None:
            self.stop.check(dev.name, where)

    def _check_model(self, st, device: str) -> str | None:
        """Another model under NAME (its current release's, else the newest sealed one's) is
        refused unless ``spec.replace_model``; returns the model it replaces, if another."""
        model = self.manifest.get("name")
        ref = st.release(st.current) if st.current else None
        ref = ref or next((r for r in reversed(st.releases) if r["sealed"]), None)
        have = (ref or {}).get("model")
        if not (have and model and have != model):
            return None
        if not self.spec.replace_model:
            raise ConfigError(f"{self.name} on {device} holds model {have!r}, this build is model {model!r}: "
                              f"pass --replace-model to deploy it as {self.name}")
        return have

    def _on(self, tr, lease, ship: Shipment, entry: DeviceEntry) -> None:
        timeout, dev = ship.settings.command_timeout_s, tr.device
        store = Releases(tr, self.name, timeout)
        st = store.state(history=0)
        entry.from_, entry.current, entry.verified = st.current, st.current, True
        for note in (st.broken, last_record_note(results_dir_of(self.opts), self.name, dev.name, st.current)):
            if note:
                entry.notes.append(note)
        replaced = self._check_model(st, dev.name)
        if replaced:
            entry.notes.append(f"replaces model {replaced}")
        swept = store.sweep()
        if swept:
            entry.notes.append(f"swept {len(swept)} incomplete release(s) of a failed deploy")
        entry.release = new_release_id(self.manifest["artifact"]["sha256"], st.ids)
        try:
            self._steps(tr, lease, store, st, ship, entry)
        except Exception:
            if tr.is_connected():
                try:
                    settle(store, entry)
                except EdgeforgeError:
                    entry.read_back = None
            raise

    def _steps(self, tr, lease, store: Releases, st, ship: Shipment, entry: DeviceEntry) -> None:
        step, timeout, dev, rid = ship.on_step, ship.settings.command_timeout_s, tr.device, entry.release
        files, digests = ship.files, ship.digests
        sha = self.manifest["artifact"]["sha256"]
        self._check(dev, "before the upload")
        step("check", f"sha256 of the files under {store.path(rid)}")
        info = sync.prepare(tr, self.manifest, ship.settings, digests, store.subdir(rid))
        missing = {rel: d for rel, d in digests.items() if info["digests"].get(rel) != d}
        if missing:
            for rel in store.link(rid, missing, also=[sha]):
                info["digests"][rel] = digests[rel]
        entry.transfer = sync.upload(tr, files, digests, info["digests"], info["dir"], timeout_s=timeout,
                                     lease=lease, on_step=step)
        lease.renew()
        pause_at("smoke")
        self._check(dev, "before the smoke test")
        step("smoke", f"{rid}: the reference inputs on the device")
        entry.smoke = run_smoke(tr, store.path(rid), digests, timeout, lease, step, self.stop)
        entry.runner_sha256 = digests[runner_file(digests)]
        m = self.manifest
        store.seal(rid, digests, {"name": self.name, "model": m.get("name"), "digest": sha,
                                  "build": str(Path(self.build_dir).resolve()), "target": m["target"],
                                  "backend": m["backend"], "precision": m["precision"],
                                  "by": operator(), "smoke": entry.smoke})
        lease.renew()
        pause_at("switch")
        self._check(dev, "before the switch")
        step("switch", f"current -> {rid}")
        if not tr.is_connected():
            raise ConnectionLost(dev.name, f"connection to {dev.address} lost before the switch was sent")
        entry.switch_sent, entry.verified = True, False
        store.switch(rid, expect=st.current, action="deploy",
                     reason=self.spec.reason or f"deploy {m.get('name') or 'model'}@{sha[:12]}")
        entry.to = entry.current = rid
        entry.verified, entry.status = True, "switched"
        pause_at("health")
        self._check(dev, "after the switch, before the health check")
        health_check_or_back(tr, store, entry, digests, timeout, lease, step, self.stop)
        entry.pruned = store.prune(self.spec.keep, protect=[rid])
        entry.status = "deployed"
        step("done", f"current is {rid}" + (f", pruned {len(entry.pruned)}" if entry.pruned else ""))


def switch_device(dev: Device, name: str, opts: ConnectionOptions, entry: DeviceEntry, sw: Switch,
                  on_step: Step = lambda d, s, m: None, stop: StopRequest | None = None) -> None:
    """Make the switch ``sw`` of NAME on ``dev``, record it, health-check it (switching back on
    failure); fills ``entry``."""
    def step(s, m):
        return on_step(dev.name, s, m)

    settings = device_timeouts(dev, opts)
    to, reason, action, expect = sw.to, sw.reason, sw.action, sw.expect

    def on(tr, lease):
        store = Releases(tr, name, settings.command_timeout_s)
        st = store.state(history=0)
        if st.broken:
            entry.notes.append(st.broken)
        entry.from_ = entry.current = st.current
        entry.verified = True
        if expect is not True and st.current != expect:
            raise ReleaseRefused(dev.name, f"{name}: current is {st.current}, not {expect}: left as it is")
        target = to if to is not None or action != "rollback" else st.previous
        if target is None and action == "rollback":
            raise ReleaseRefused(dev.name, f"{name}: no release before {st.current or '(none)'} to roll back to",
                                 hint=f"`edgeforge releases {name} --device {dev.name}` lists them; pass --to ID")
        rel = st.release(target) if target else None
        if target and (rel is None or not rel["sealed"]):
            raise ReleaseRefused(dev.name, f"{name}: release {target} is "
                                 + ("incomplete (its sha256 never checked out)" if rel else "not on the device"))
        if target == st.current:
            entry.status, entry.to = "unchanged", target
            entry.notes.append(f"{target} is already current")
            return
        if stop is not None:
            stop.check(dev.name, "before the switch")
        step("switch", f"current -> {target or 'none'}")
        entry.switch_sent, entry.verified = True, False
        store.switch(target, expect=st.current, reason=reason, action=action)
        entry.to = entry.current = target
        entry.status, entry.verified = "switched", True
        if target:
            health_check_or_back(tr, store, entry, rel["files"], settings.command_timeout_s, lease, step, stop)
        entry.status = "rolled back" if action == "rollback" else "reverted"

    step("connect", f"{dev.name} ({dev.address})")
    with session(dev, opts, settings, f"edgeforge {action} {name}", step) as ses:
        on(ses.tr, ses.lease)
