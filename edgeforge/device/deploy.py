"""edgeforge deploy / rollback / releases: model versions on devices, switched atomically.

A deploy of one build to one device, under the device's lease (:mod:`.lease`):

1. read the device's releases of NAME (:mod:`.releases`); a ``current`` that points at a
   missing release is reported (a note, and ``from_missing`` in the history), never repaired;
2. upload the release by digest into ``<workdir>/deploy/NAME/releases/<id>/`` with bench's code
   (:meth:`.bench.Bench.prepare` / ``upload``): files another release or a bench directory on
   the device already holds, by sha256, are linked instead of sent;
3. smoke test: the runner (``edgeforge_runner.py smoke``) checks every sha256, loads the release
   with the target's runtime, runs the reference inputs and judges the drift against the build's
   budget (the host verify's rules). A failed smoke test removes the release: exit 1;
4. seal the release (sha256 checked again, ``release.json``) and switch ``current`` to it
   (a new symlink renamed over ``current``, one history line);
5. health check through ``current`` (the smoke test again, by the symlink). If it fails, switch
   back at once, record why, and fail with exit 4;
6. prune: keep the newest N releases, never ``current`` or the release before it.

A failure before step 4 (a lost connection mid-upload or mid-smoke, a digest that does not
check out) leaves ``current`` as it was. Fleets and canaries: :func:`deploy`.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from ..errors import (
    Busy,
    ConfigError,
    ConnectionLost,
    EdgeforgeError,
    GateFailed,
    Unhealthy,
)
from ..manifest import read_manifest
from ..options import BenchOptions
from ..results.deploy import DeviceEntry, new_record
from .bench import (
    BACKOFF_S,
    Bench,
    build_files,
    guarded,
    resolve_settings,
)
from .health import HealthStore
from .inventory import Device, load_inventory, select_devices
from .lease import Lease, lease_ttl
from ..errors import HealthCheckFailed, ReleaseRefused, SmokeFailed
from .releases import (
    run_smoke,
    Releases,
    check_id,
    NAME_HINT_DEPLOY,
    check_name,
    new_release_id,
    operator,
)

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


def device_settings(dev: Device, opts: BenchOptions) -> SimpleNamespace:
    """Timeouts for a verb without a build (rollback, releases): the flags, else the target's."""
    from ..targets import load_target

    try:
        b = load_target(dev.target).bench
        connect, command = b.connect_timeout_s, b.command_timeout_s
    except ConfigError:
        connect, command = 10.0, 600.0
    return SimpleNamespace(connect_timeout_s=float(opts.connect_timeout or connect),
                           command_timeout_s=float(opts.timeout or command))


class _Link:
    """One device connection, with bench's connect (retries, backoff) and its lease."""

    connect = Bench.connect

    def __init__(self, dev: Device, settings, opts: BenchOptions, on_step):
        self.device, self.settings, self.retries, self.backoff_s = dev, settings, opts.retries, BACKOFF_S
        self.trust_new_host, self.wait_s, self.on_step, self.attempts = opts.trust_new_host, opts.wait, on_step, 0

    def __call__(self, what: str, fn):
        """``fn(tr, lease)`` on the device, under its lease."""
        tr = self.connect()
        try:
            lease = Lease(tr, lease_ttl(self.settings.command_timeout_s), wait_s=self.wait_s, what=what,
                          on_step=self.on_step)
            lease.acquire()
            try:
                return fn(tr, lease)
            finally:
                lease.release()
        finally:
            tr.close()


def _detail(exc: EdgeforgeError) -> str:
    return getattr(exc, "detail", None) or exc.message


def health_check_or_back(tr, store: Releases, entry: DeviceEntry, files, timeout_s, lease, on_step) -> None:
    """The smoke test through ``current`` after a switch to ``entry.to``; on failure switch back
    to ``entry.from_`` and raise HealthCheckFailed (exit 4)."""
    dev = tr.device
    on_step("health", f"smoke test through {store.path()}")
    try:
        entry.health = run_smoke(tr, store.path(), files, timeout_s, lease, on_step)
        return
    except EdgeforgeError as exc:
        why = _detail(exc)
    if not tr.is_connected():
        raise ConnectionLost(dev.name, f"connection lost during the health check ({why}); current may still be "
                             f"on {entry.to}", hint=f"check with `edgeforge releases {store.name} --device {dev.name}`")
    store.switch(entry.from_, expect=entry.to, reason=f"health check failed: {why}", action="switch-back")
    entry.current = entry.from_
    raise HealthCheckFailed(dev.name, f"health check through current failed ({why}); switched back to "
                            f"{entry.from_ or 'no release'}")


@dataclass
class Deployer:
    """One build to one device (steps in the module doc); fills ``entry`` as it goes."""

    build_dir: Path
    manifest: dict
    name: str
    opts: BenchOptions
    spec: DeploySpec
    on_step: Step = lambda d, s, m: None

    def __call__(self, dev: Device, entry: DeviceEntry) -> None:
        def step(s, m):
            return self.on_step(dev.name, s, m)

        b = Bench(self.build_dir, dev, resolve_settings(self.manifest, dev, self.opts), self.opts, on_step=step)
        files = release_files(self.build_dir, self.manifest)
        digests = b.local_digests(files)
        sha = self.manifest["artifact"]["sha256"]
        link = _Link(dev, b.settings, self.opts, step)
        step("connect", f"{dev.name} ({dev.address})")
        link(f"edgeforge deploy {self.name}@{sha[:12]}", lambda tr, lease: self._on(tr, lease, b, files, digests, entry))

    def _on(self, tr, lease, b: Bench, files, digests, entry: DeviceEntry) -> None:
        step, timeout = b.on_step, b.settings.command_timeout_s
        store = Releases(tr, self.name, timeout)
        st = store.state(history=0)
        if st.broken:
            entry.notes.append(st.broken)
        sha = self.manifest["artifact"]["sha256"]
        rid = new_release_id(sha, st.ids)
        entry.release, entry.from_, entry.current = rid, st.current, st.current
        b.lease, b.remote_subdir = lease, store.subdir(rid)
        step("check", f"sha256 of the files under {store.path(rid)}")
        info = b.prepare(tr, digests)
        missing = {rel: d for rel, d in digests.items() if info["digests"].get(rel) != d}
        if missing:
            for rel in store.link(rid, missing, also=[sha]):
                info["digests"][rel] = digests[rel]
                b.transfer["reused"].append(rel)
        b.upload(tr, files, digests, info["digests"])
        entry.transfer = dict(b.transfer)
        lease.renew()
        step("smoke", f"{rid}: the reference inputs on the device")
        try:
            entry.smoke = run_smoke(tr, store.path(rid), digests, timeout, lease, step)
        except SmokeFailed:
            if tr.is_connected():
                store.remove(rid)
            raise
        m = self.manifest
        store.seal(rid, digests, {"name": self.name, "digest": sha, "build": str(Path(self.build_dir).resolve()),
                                  "target": m["target"], "backend": m["backend"], "precision": m["precision"],
                                  "by": operator(), "smoke": entry.smoke})
        lease.renew()
        step("switch", f"current -> {rid}")
        store.switch(rid, expect=st.current, action="deploy",
                     reason=self.spec.reason or f"deploy {m.get('name') or 'model'}@{sha[:12]}")
        entry.to = entry.current = rid
        entry.status = "switched"
        health_check_or_back(tr, store, entry, digests, timeout, lease, step)
        entry.pruned = store.prune(self.spec.keep, protect=[rid])
        entry.status = "deployed"
        step("done", f"current is {rid}" + (f", pruned {len(entry.pruned)}" if entry.pruned else ""))


def switch_device(dev: Device, name: str, opts: BenchOptions, entry: DeviceEntry, sw: Switch,
                  on_step: Step = lambda d, s, m: None) -> None:
    """Make the switch ``sw`` of NAME on ``dev``, record it, health-check it (switching back on
    failure); fills ``entry``."""
    def step(s, m):
        return on_step(dev.name, s, m)

    settings = device_settings(dev, opts)
    to, reason, action, expect = sw.to, sw.reason, sw.action, sw.expect

    def on(tr, lease):
        store = Releases(tr, name, settings.command_timeout_s)
        st = store.state(history=0)
        if st.broken:
            entry.notes.append(st.broken)
        entry.from_ = entry.current = st.current
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
        step("switch", f"current -> {target or 'none'}")
        store.switch(target, expect=st.current, reason=reason, action=action)
        entry.to = entry.current = target
        entry.status = "switched"
        if target:
            health_check_or_back(tr, store, entry, rel["files"], settings.command_timeout_s, lease, step)
        entry.status = "rolled back" if action == "rollback" else "reverted"

    step("connect", f"{dev.name} ({dev.address})")
    _Link(dev, settings, opts, step)(f"edgeforge {action} {name}", on)


def list_releases(name: str, device: str, opts: BenchOptions | None = None):
    """(device, State) of NAME on DEVICE: read-only, no lease (the script takes the flock)."""
    opts = opts or BenchOptions()
    check_name(name)
    dev = load_inventory(opts.inventory).get(device)
    link = _Link(dev, device_settings(dev, opts), opts, lambda s, m: None)
    tr = link.connect()
    try:
        return dev, Releases(tr, name, link.settings.command_timeout_s).state()
    finally:
        tr.close()


# ---------------------------------------------------------------- fleets and canaries

def _record_error(entry: DeviceEntry, exc: BaseException) -> None:
    if isinstance(exc, Busy):
        entry.status = "busy"
    elif isinstance(exc, Unhealthy):
        entry.status = "skipped"
    elif isinstance(exc, GateFailed):
        entry.status = "smoke failed" if isinstance(exc, SmokeFailed) else "gate failed"
    else:
        entry.status = "switched back" if isinstance(exc, HealthCheckFailed) else "failed"
    if isinstance(exc, EdgeforgeError):
        entry.error, entry.hint = _detail(exc), exc.hint
        entry.exit_code = int(exc.exit_code)
    else:  # a bug: still a value for this device only
        entry.error, entry.exit_code = f"internal error {type(exc).__name__}: {exc}", 70


def _parallel(work, entries, jobs=None) -> None:
    if entries:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs or len(entries), len(entries))),
                                thread_name_prefix="edgeforge-deploy") as pool:
            list(pool.map(work, entries))


def _guarded_each(inv_path, opts: BenchOptions, store: HealthStore, fn):
    def work(pair):
        dev, entry = pair
        try:
            guarded(inv_path, dev.name, lambda: fn(dev, entry), enabled=opts.health, store=store)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            _record_error(entry, exc)
    return work


def deploy(build_dir, devices: str, opts: BenchOptions | None = None, spec: DeploySpec | None = None, *,
           on_step: Step | None = None):
    """Deploy BUILD_DIR to the selected devices (a name, tags, or 'all'); returns the
    ``edgeforge.deploy/1`` record, one entry per device. With ``spec.canary`` K: the first K
    devices first, benched (through ``current``) and gated with ``spec.gates``; if they pass the
    rest follow, else the canaries are switched back and the rest are not touched."""
    from .fleet import new_id, plan

    opts, spec = opts or BenchOptions(), spec or DeploySpec()
    name, keep, canary, jobs = spec.name, spec.keep, spec.canary, spec.jobs
    on_step = on_step or (lambda d, s, m: None)
    gates = {k: v for k, v in (spec.gates or {}).items() if v is not None}
    if name is not None:
        check_name(name, NAME_HINT_DEPLOY)
    manifest = read_manifest(build_dir)
    name = check_name(name or manifest.get("name") or "model", NAME_HINT_DEPLOY)
    if keep < 1:
        raise ConfigError("--keep must be >= 1")
    inv, runs = plan([build_dir], devices, opts.inventory)
    pairs = [(r.device, DeviceEntry(device=r.name, target=r.device.target)) for r in runs]
    for (_dev, entry), r in zip(pairs, runs):
        if not r.jobs:
            entry.status, entry.notes = "not deployed", [r.note]
    todo = [(d, e) for d, e in pairs if e.status == "pending"]
    if canary and canary >= len(todo):
        raise ConfigError(f"--canary {canary} needs more devices: {len(todo)} selected for {manifest['target']}")
    if gates and not canary:
        raise ConfigError("gate flags apply to the canaries: pass --canary K with them")
    record = new_record("deploy", new_id("deploy"), name, build_dir=build_dir, manifest=manifest, keep=keep,
                        canary=canary, gates=gates)
    record.devices = [e for _, e in pairs]
    store = HealthStore(inv.path)
    dep = Deployer(Path(build_dir), manifest, name, opts, spec, on_step)
    first, rest = (todo[:canary], todo[canary:]) if canary else (todo, [])
    for _, e in first:
        e.role = "canary" if canary else "device"
    _parallel(_guarded_each(inv.path, opts, store, dep), first, jobs)
    if canary:
        why = _canary_verdict(build_dir, first, opts, gates, record, on_step)
        if why:
            for dev, e in first:
                if e.current == e.release and e.release:
                    _revert(dev, name, opts, e, why, on_step)
            for _, e in rest:
                e.role, e.status, e.notes = "rest", "not deployed", [f"canary failed: {why}"]
        else:
            for _, e in rest:
                e.role = "rest"
            _parallel(_guarded_each(inv.path, opts, store, dep), rest, jobs)
    record.notes = list(dict.fromkeys(store.warnings))
    return record


def _canary_verdict(build_dir, canaries, opts: BenchOptions, gates: dict, record, on_step) -> str | None:
    """Bench the canaries that were deployed (through ``current``) and gate them; the reason
    they failed, or None."""
    from ..report.gates import evaluate_gates

    failed = [e for _, e in canaries if e.status != "deployed"]
    if failed:
        return "; ".join(f"{e.device}: {e.error or e.status}" for e in failed)
    results = []
    for dev, e in canaries:
        b = Bench(build_dir, dev, resolve_settings(read_manifest(build_dir), dev, opts), opts,
                  on_step=lambda s, m, n=dev.name: on_step(n, s, m), tags={"deploy": {"id": record.id, "role": "canary"}})
        b.remote_subdir = f"deploy/{record.name}/current"
        try:
            out = b.run()
        except EdgeforgeError as exc:
            e.error, e.hint = f"canary bench: {_detail(exc)}", exc.hint
            e.status, e.exit_code = "failed", int(exc.exit_code)
            return f"{dev.name}: bench failed: {_detail(exc)}"
        e.bench_result = str(out.path)
        results.append(out.result)
    verdicts = evaluate_gates(results, **gates) if gates else []
    for _, e in canaries:
        e.gates = [g.to_dict() for g in verdicts if g.device == e.device]
    bad = [g for g in verdicts if not g.passed]
    for _, e in canaries:
        if any(g.device == e.device for g in bad):
            e.status, e.exit_code = "gate failed", 1
            e.error = "; ".join(f"{g.name}: {g.message}" for g in bad if g.device == e.device)
    return "; ".join(f"{g.device}: {g.name}: {g.message}" for g in bad) or None


def _revert(dev: Device, name: str, opts: BenchOptions, e: DeviceEntry, why: str, on_step) -> None:
    """Switch a canary back to the release it ran before (or to none)."""
    status, back = e.status, DeviceEntry(device=e.device, target=e.target)
    try:
        switch_device(dev, name, opts, back, Switch(e.from_, f"canary failed: {why}", "canary-revert", e.release),
                      on_step)
        e.current = back.current
        e.status = status if status in ("gate failed", "failed") else "reverted"
        e.notes.append(f"switched back to {e.from_ or 'no release'}")
    except EdgeforgeError as exc:
        e.status, e.exit_code = "failed", 4
        e.notes.append(f"could not switch back: {_detail(exc)}")


def rollback(name: str, devices: str, opts: BenchOptions | None = None, *, to: str | None = None,
             reason: str | None = None, on_step: Step | None = None):
    """Switch NAME back on the selected devices: to the release before current, or to ``to``."""
    from .fleet import new_id

    opts = opts or BenchOptions()
    check_name(name)
    if to is not None:
        check_id(to)
    inv = load_inventory(opts.inventory)
    pairs = [(d, DeviceEntry(device=d.name, target=d.target, role="device")) for d in select_devices(inv, devices)]
    record = new_record("rollback", new_id("rollback"), name)
    record.devices = [e for _, e in pairs]
    sw = Switch(to, reason or (f"rollback to {to}" if to else "rollback"))

    def work(dev, e):
        return switch_device(dev, name, opts, e, sw, on_step or (lambda d, s, m: None))

    _parallel(_guarded_each(inv.path, opts.model_copy(update={"health": False}), HealthStore(inv.path), work), pairs)
    return record
