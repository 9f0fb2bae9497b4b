"""Fleet bench: one or more builds on many devices, in parallel, failure as a value per device.

Each selected device gets every build whose target is the device's target (``target`` in
devices.toml == the manifest's ``target``). Devices run in parallel on a thread pool
(``concurrent.futures``; ``jobs`` workers, default one per device); the builds of one device
run one after the other, each under the device's lease (:mod:`.lease`), with transient connect
errors retried (:class:`.bench.Bench`). A device that fails (unreachable after its retries,
lost mid-run, busy, runner failed) is recorded with its cause and stops taking builds; the
other devices go on, and every result already written stays. Devices marked unhealthy
(:mod:`.health`) are skipped with a note.

Nothing here prints or exits: :func:`fleet_bench` returns a :class:`FleetOutcome`.
"""
from __future__ import annotations

import datetime as _dt
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ...errors import Busy, ConfigError, DeviceError, EdgeforgeError, Unhealthy
from ...options import BenchOptions
from .bench import build_files, guarded, resolve_settings
from .pick import bench_class
from ..link.settings import check_results_dir, results_dir_of
from ..link.health import UNHEALTHY_AFTER, HealthStore, skip_note
from ..link.inventory import Device, load_inventory, select_devices, select_where

FleetStep = Callable[[str, str, str], None]     # (device, step, message)


@dataclass
class Job:
    """One build on one device."""
    build_dir: Path
    manifest: dict
    status: str = "pending"          # ok | failed | not run
    result: dict | None = None
    path: Path | None = None
    error: str | None = None

    @property
    def label(self) -> str:
        m = self.manifest
        return f"{m.get('name') or 'model'}/{m['target']}/{m['backend']}/{m['precision']}"


@dataclass
class DeviceRun:
    device: Device
    jobs: list[Job] = field(default_factory=list)
    status: str = "pending"          # ok | failed | busy | skipped (unhealthy) | idle (no build for it)
    error: str | None = None         # the cause, one line, without the "device NAME: " prefix
    hint: str | None = None          # what to do about it
    note: str | None = None

    @property
    def name(self) -> str:
        return self.device.name

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "busy")


@dataclass
class FleetOutcome:
    id: str
    runs: list[DeviceRun]
    notes: list[str] = field(default_factory=list)      # e.g. a health state file that could not be written

    @property
    def failed(self) -> list[DeviceRun]:
        return [r for r in self.runs if r.failed]

    @property
    def ok(self) -> list[DeviceRun]:
        return [r for r in self.runs if r.status == "ok"]

    @property
    def results(self) -> list[dict]:
        return [j.result for r in self.runs for j in r.jobs if j.status == "ok"]

    def to_dict(self) -> dict:
        return {"fleet": self.id, "notes": self.notes, "devices": [
            {"device": r.name, "target": r.device.target, "status": r.status, "error": r.error, "hint": r.hint,
             "note": r.note,
             "benches": [{"build": str(j.build_dir), "label": j.label, "status": j.status,
                          "result": str(j.path) if j.path else None, "error": j.error,
                          "p50_ms": (j.result or {}).get("summary", {}).get("p50_ms")} for j in r.jobs]}
            for r in self.runs]}


def new_id(kind: str) -> str:
    return f"{kind}-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def plan(build_dirs, selector: str | None, inventory=None, where: dict | None = None) -> tuple[object, list[DeviceRun]]:
    """Read the builds and the inventory; pair each selected device with its builds (``where``:
    the labgrid places with those tags, in place of ``selector``).

    Raises ConfigError (exit 2, before anything runs) for an unreadable or modified build, an
    unknown device or tag, and a build no selected device can run."""
    from ...api import read_manifest
    from ...cache import sha256_file

    if not build_dirs:
        raise ConfigError("no build directory given")
    builds: list[tuple[Path, dict]] = []
    seen = set()
    for b in build_dirs:
        p = Path(b)
        if p.resolve() in seen:
            continue
        seen.add(p.resolve())
        m = read_manifest(p)
        build_files(p, m)
        if sha256_file(p / m["artifact"]["path"]) != m["artifact"]["sha256"]:
            raise ConfigError(f"{p / m['artifact']['path']} does not match the sha256 in its manifest",
                              hint="the build was modified; rebuild it")
        builds.append((p, m))
    inv = load_inventory(inventory)
    devices = select_where(inv, where) if where else select_devices(inv, selector, lab_down_ok=True)
    if where:
        selector = "--where " + " ".join(f"{k}={v}" for k, v in where.items())
    lab_run = lab_down(inv, selector) if not where else None
    for p, m in builds:
        if lab_run is None and not any(d.target == m["target"] for d in devices):
            have = ", ".join(sorted({d.target for d in devices}))
            raise ConfigError(f"no selected device is a {m['target']}, the target of {p}",
                              hint=f"the devices selected by '{selector}' are: {have}")
    runs = []
    for d in devices:
        jobs = [Job(p, m) for p, m in builds if m["target"] == d.target]
        run = DeviceRun(d, jobs)
        if not jobs:
            run.status, run.note = "idle", f"no build for its target {d.target}"
        runs.append(run)
    return inv, runs + ([lab_run] if lab_run is not None else [])


def lab_down(inv, selector: str | None) -> DeviceRun | None:
    """``--devices all`` with a ``[labgrid]`` coordinator that does not answer: the lab's devices
    are unknown, so they fail together as one entry naming the coordinator (exit 4), beside the
    static devices that run (docs/lab.md). None otherwise (a named item of the lab that is not
    found raises the lab's error in :func:`select_devices`)."""
    lab = inv.lab
    if lab is None or lab.error is None or "all" not in [s.strip() for s in str(selector or "").split(",")]:
        return None
    stand_in = Device.model_construct(name="labgrid", host=lab.coordinator, target="(the lab's)",
                                      workdir="/", tags=[], port=None, user=None)
    return DeviceRun(stand_in, status="failed", error=_message(lab.error), hint=lab.error.hint)


def fleet_bench(build_dirs, devices: str, opts: BenchOptions | None = None, *,
                jobs: int | None = None, on_step: FleetStep | None = None,
                unhealthy_after: int = UNHEALTHY_AFTER, where: dict | None = None) -> FleetOutcome:
    """Bench every build on every selected device whose target it is (see the module doc).
    ``jobs``: devices benched at once (default: all). ``where``: labgrid tags selecting the lab's
    places in place of ``devices``; each place is reserved and acquired only for its own benches."""
    opts = opts or BenchOptions()
    health = opts.health
    on_step = on_step or (lambda dev, step, msg: None)
    inv, device_runs = plan(build_dirs, devices, opts.connection.inventory, where)
    check_results_dir(results_dir_of(opts))      # before any device measures anything
    fid = new_id("fleet")
    store = HealthStore(inv.path, unhealthy_after)
    settings = {}
    for r in device_runs:                       # flags are checked before anything runs
        for j in r.jobs:
            settings[id(j)] = resolve_settings(j.manifest, r.device, opts)
    if health:
        for r in device_runs:
            entry = store.unhealthy(r.name) if r.jobs else None
            if entry:
                r.status, r.note = "skipped", skip_note(r.name, entry)
                for j in r.jobs:
                    j.status = "not run"
                on_step(r.name, "skipped", "marked unhealthy")
    todo = [r for r in device_runs if r.status == "pending"]

    def work(r: DeviceRun) -> None:
        step = lambda s, msg: on_step(r.name, s, msg)  # noqa: E731

        def benches():
            for i, job in enumerate(r.jobs):
                step("build", f"{job.label} ({i + 1} of {len(r.jobs)})")
                b = bench_class(r.device)(job.build_dir, r.device, settings[id(job)], opts, on_step=step,
                          tags={"fleet": {"id": fid}})
                try:
                    out = b.run()
                except EdgeforgeError as exc:
                    job.status, job.error = "failed", _one(exc)
                    for rest in r.jobs[i + 1:]:
                        rest.status, rest.error = "not run", f"an earlier bench on {r.name} failed"
                    raise
                job.status, job.result, job.path = "ok", out.result, out.path
            step("done", f"{len(r.jobs)} bench(es)")

        try:
            guarded(inv.path, r.name, benches, enabled=health, store=store)
            r.status = "ok"
        except Busy as exc:
            r.status, r.error, r.hint = "busy", _message(exc), exc.hint
        except Unhealthy as exc:
            r.status, r.note = "skipped", exc.detail.removeprefix("skipped: ")
            for j in r.jobs:
                j.status = "not run"
        except EdgeforgeError as exc:
            r.status, r.error, r.hint = "failed", _message(exc), exc.hint
        except Exception as exc:  # noqa: BLE001 - a bug, but still a value for this device only
            first = str(exc).splitlines()[0] if str(exc) else ""
            r.status, r.error = "failed", f"internal error {type(exc).__name__}: {first}"
        step("done" if r.status == "ok" else r.status, r.error or r.note or "")

    if todo:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs or len(todo), len(todo))),
                                thread_name_prefix="edgeforge-fleet") as pool:
            list(pool.map(work, todo))
    return FleetOutcome(fid, device_runs, notes=list(dict.fromkeys(store.warnings)))


def _message(exc: EdgeforgeError) -> str:
    return exc.detail if isinstance(exc, DeviceError) else exc.message


def _one(exc: EdgeforgeError) -> str:
    return f"{_message(exc)}; {exc.hint}" if exc.hint else _message(exc)
