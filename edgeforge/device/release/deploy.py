"""edgeforge deploy / rollback / releases: model versions on devices, switched atomically.

One device's deploy, its steps and what it does on a failure: :mod:`.deploy_device` and
:mod:`.deploy_safety`. Here: the verbs over a selection of devices, canaries, rollback, and
the read-only listing.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path

from ...errors import (Busy, ConfigError, EdgeforgeError, GateFailed, HealthCheckFailed, Interrupted, SmokeFailed,
                      Unhealthy)
from ...manifest import read_manifest
from ...options import BenchOptions, ConnectionOptions
from ...results.deploy import DeviceEntry, new_record
from ..measure.bench import Bench, guarded, resolve_settings
from .deploy_device import KEEP, Deployer, DeploySpec, Step, Switch, detail, release_files, switch_device
from .deploy_safety import HealthUnchecked, StateUnknown, StopRequest, last_record_note
from ..link.health import HealthStore
from ..link.inventory import Device, load_inventory, select_devices
from .releases import NAME_HINT_DEPLOY, Releases, check_id, check_name
from ..link.session import Session, device_timeouts
from ..link.settings import results_dir_of

__all__ = ["KEEP", "DeploySpec", "Switch", "Deployer", "deploy", "rollback", "list_releases", "release_files",
           "switch_device"]


def list_releases(name: str, device: str, opts: ConnectionOptions | None = None, results_dir=None):
    """(device, State) of NAME on DEVICE: read-only, no lease (the script takes the flock).
    ``State.record_note``: the newest record of NAME in the results directory (``results_dir``,
    else $EDGEFORGE_RESULTS or results/) that did not read this device back, when the device
    says otherwise."""
    opts = opts or ConnectionOptions()
    check_name(name)
    dev = load_inventory(opts.inventory).get(device)
    t = device_timeouts(dev, opts)
    with Session(dev, opts, connect_timeout_s=t.connect_timeout_s, command_timeout_s=t.command_timeout_s,
                 lease=False) as ses:
        st = Releases(ses.tr, name, t.command_timeout_s).state()
    st.record_note = last_record_note(Path(results_dir) if results_dir else results_dir_of(None), name, dev.name,
                                      st.current)
    return dev, st


# ---------------------------------------------------------------- fleets and canaries

def _record_error(entry: DeviceEntry, exc: BaseException) -> None:
    if isinstance(exc, (Interrupted, HealthUnchecked, StateUnknown, ConfigError)):
        entry.status = ("interrupted" if isinstance(exc, Interrupted) else "unknown" if isinstance(exc, StateUnknown)
                        else "refused" if isinstance(exc, ConfigError) else "switched, health unchecked")
    elif isinstance(exc, Busy):
        entry.status = "busy"
    elif isinstance(exc, Unhealthy):
        entry.status = "skipped"
    elif isinstance(exc, GateFailed):
        entry.status = "smoke failed" if isinstance(exc, SmokeFailed) else "gate failed"
    else:
        entry.status = "switched back" if isinstance(exc, HealthCheckFailed) else "failed"
    if isinstance(exc, EdgeforgeError):
        entry.error, entry.hint = detail(exc), exc.hint
        entry.exit_code = int(exc.exit_code)
    else:  # a bug: still a value for this device only
        entry.error, entry.exit_code = f"internal error {type(exc).__name__}: {exc}", 70


def _parallel(work, entries, jobs=None) -> None:
    """``work(entry)`` for each entry in threads; the main thread waits in short slices, so a
    :class:`StopRequest` handler runs at once (the workers stop at their next step)."""
    if entries:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs or len(entries), len(entries))),
                                thread_name_prefix="edgeforge-deploy") as pool:
            futures = [pool.submit(work, e) for e in entries]
            pending = set(futures)
            while pending:
                _, pending = wait(pending, timeout=0.25)
            for f in futures:
                f.result()


def _guarded_each(inv_path, health: bool, store: HealthStore, fn):
    def work(pair):
        dev, entry = pair
        try:
            guarded(inv_path, dev.name, lambda: fn(dev, entry), enabled=health, store=store)
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
    from ..measure.fleet import new_id, plan

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
    inv, runs = plan([build_dir], devices, opts.connection.inventory)
    pairs = [(r.device, DeviceEntry(device=r.name, target=r.device.target)) for r in runs]
    for (_dev, entry), r in zip(pairs, runs):
        if r.status == "failed":           # the lab's coordinator does not answer: its devices fail
            entry.status, entry.error, entry.hint, entry.exit_code = "failed", r.error, r.hint, 4
        elif not r.jobs:
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
    with StopRequest() as stop:
        dep = Deployer(Path(build_dir), manifest, name, opts, spec, on_step, stop)
        _fleet(dep, inv, store, todo, record, jobs)
    record.notes = list(dict.fromkeys(store.warnings))
    if stop.requested:
        record.notes.append(f"interrupted ({stop.signal_name}): each device stopped at its next step")
    return record


def _fleet(dep: Deployer, inv, store, todo, record, jobs) -> None:
    """The canaries first (when ``record.canary``), then the rest; a stop request leaves the rest."""
    name, build_dir, opts, on_step = dep.name, dep.build_dir, dep.opts, dep.on_step
    canary, gates = record.canary, record.gates
    first, rest = (todo[:canary], todo[canary:]) if canary else (todo, [])
    for _, e in first:
        e.role = "canary" if canary else "device"
    _parallel(_guarded_each(inv.path, opts.health, store, dep), first, jobs)
    if canary and dep.stop.requested:
        for _, e in rest:
            e.role, e.status, e.notes = "rest", "not deployed", [f"interrupted ({dep.stop.signal_name})"]
    elif canary:
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
            _parallel(_guarded_each(inv.path, opts.health, store, dep), rest, jobs)


def _canary_verdict(build_dir, canaries, opts: BenchOptions, gates: dict, record, on_step) -> str | None:
    """Bench the canaries that were deployed (through ``current``) and gate them; the reason
    they failed, or None."""
    from ...report.gates import GateThresholds, evaluate_gates

    failed = [e for _, e in canaries if e.status != "deployed"]
    if failed:
        return "; ".join(f"{e.device}: {e.error or e.status}" for e in failed)
    results = []
    for dev, e in canaries:
        b = Bench(build_dir, dev, resolve_settings(read_manifest(build_dir), dev, opts), opts,
                  on_step=lambda s, m, n=dev.name: on_step(n, s, m), tags={"deploy": {"id": record.id, "role": "canary"}},
                  remote_subdir=f"deploy/{record.name}/current")
        try:
            out = b.run()
        except EdgeforgeError as exc:
            e.error, e.hint = f"canary bench: {detail(exc)}", exc.hint
            e.status, e.exit_code = "failed", int(exc.exit_code)
            return f"{dev.name}: bench failed: {detail(exc)}"
        e.bench_result = str(out.path)
        results.append(out.result)
    # --min-int8-speedup: the canaries ran INT8 only; their fp32 counterparts are the earlier
    # fp32 runs on the same devices in the results directory (a canary without one fails the
    # gate, saying so)
    reference = []
    if gates.get("min_int8_speedup") is not None:
        from ...report.load import earlier_results

        reference = earlier_results(results_dir_of(opts), [e.bench_result for _, e in canaries])
    limits = {k: v for k, v in gates.items() if k != "force"}
    verdicts = (evaluate_gates(results, GateThresholds(**limits), reference=reference, force=bool(gates.get("force")))
                if limits else [])
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
        switch_device(dev, name, opts.connection, back, Switch(e.from_, f"canary failed: {why}", "canary-revert", e.release),
                      on_step)
        e.current = back.current
        e.status = status if status in ("gate failed", "failed") else "reverted"
        e.notes.append(f"switched back to {e.from_ or 'no release'}")
    except EdgeforgeError as exc:
        e.status, e.exit_code = "failed", 4
        e.notes.append(f"could not switch back: {detail(exc)}")


def rollback(name: str, devices: str, opts: ConnectionOptions | None = None, *, to: str | None = None,
             reason: str | None = None, on_step: Step | None = None):
    """Switch NAME back on the selected devices: to the release before current, or to ``to``."""
    from ..measure.fleet import lab_down, new_id

    opts = opts or ConnectionOptions()
    check_name(name)
    if to is not None:
        check_id(to)
    inv = load_inventory(opts.inventory)
    pairs = [(d, DeviceEntry(device=d.name, target=d.target, role="device"))
             for d in select_devices(inv, devices, lab_down_ok=True)]
    record = new_record("rollback", new_id("rollback"), name)
    record.devices = [e for _, e in pairs]
    lab = lab_down(inv, devices)           # `--devices all`, the coordinator gone: the lab fails, the rest go on
    if lab is not None:
        record.devices.append(DeviceEntry(device=lab.name, target=lab.device.target, role="device", status="failed",
                                          error=lab.error, hint=lab.hint, exit_code=4))
    sw = Switch(to, reason or (f"rollback to {to}" if to else "rollback"))

    with StopRequest() as stop:
        def work(dev, e):
            return switch_device(dev, name, opts, e, sw, on_step or (lambda d, s, m: None), stop)

        _parallel(_guarded_each(inv.path, False, HealthStore(inv.path), work), pairs)
    return record
