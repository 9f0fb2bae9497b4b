"""Sweep: one project on one device over precision x threads x power mode.

- precisions: ``fp32`` and ``int8`` by default (one that the backend cannot build on this target,
  e.g. Paddle Lite x86 INT8, is skipped with a note; one asked for by name is an error);
- threads: 1, 2, 4, ... up to the target's cores, and the core count itself (or ``threads``);
- power modes: the target's ``runtime.power_modes`` (none where it lists none).

Each precision is built once with :func:`edgeforge.api.build` (content-cached, so an unchanged
project builds nothing), then each point is one ordinary bench (:class:`.bench.Bench`) with the
point's threads and power mode, written as a normal ``edgeforge.bench/1`` result tagged with
``sweep: {id, point, index, points}``. The sweep runs under the device's lease one bench at a time;
a device failure stops it (the points already measured are kept). Nothing here prints or exits.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...errors import ConfigError, DeviceError, Unhealthy
from ...options import BenchOptions, BuildOptions
from .bench import Step, guarded, resolve_settings
from .pick import bench_class
from .fleet import new_id
from ..link.inventory import load_inventory

DEFAULT_PRECISIONS = ("fp32", "int8")


@dataclass
class SweepPoint:
    precision: str
    threads: int
    power_mode: str | None
    build_dir: Path | None = None
    status: str = "pending"          # ok | failed | not run
    result: dict | None = None
    path: Path | None = None
    error: str | None = None

    @property
    def p50_ms(self) -> float | None:
        return (self.result or {}).get("summary", {}).get("p50_ms")

    def key(self) -> tuple:
        return (self.threads, self.power_mode)


@dataclass
class SweepOutcome:
    id: str
    device: str
    target: str
    backend: str
    points: list[SweepPoint]
    notes: list[str] = field(default_factory=list)
    verify_failed: list[str] = field(default_factory=list)     # precisions whose build failed verify
    error: DeviceError | None = None

    @property
    def results(self) -> list[dict]:
        return [p.result for p in self.points if p.status == "ok"]

    def speedup(self, point: SweepPoint) -> float | None:
        """p50(fp32) / p50(this point) at the same threads and power mode (None for fp32 itself)."""
        if point.precision == "fp32" or point.p50_ms is None:
            return None
        ref = next((p for p in self.points if p.precision == "fp32" and p.key() == point.key()
                    and p.p50_ms is not None), None)
        return ref.p50_ms / point.p50_ms if ref else None

    def reference(self, point: SweepPoint) -> dict | None:
        """The fp32 result at the point's threads and power mode (None for fp32 itself)."""
        if point.precision == "fp32":
            return None
        return next((p.result for p in self.points if p.precision == "fp32" and p.key() == point.key()
                     and p.result), None)


def default_threads(cores: int) -> list[int]:
    """1, 2, 4, ... below ``cores``, and ``cores`` itself."""
    out, n = [], 1
    while n < cores:
        out.append(n)
        n *= 2
    return out + [max(1, cores)]


def parse_list(text: str | None, kind=str, what: str = "value") -> list | None:
    if text is None:
        return None
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise ConfigError(f"empty list of {what}s")
    try:
        values = [kind(t) for t in items]
    except ValueError:
        raise ConfigError(f"expected a comma-separated list of {what}s, not {text!r}") from None
    if kind is int and any(v <= 0 for v in values):
        raise ConfigError(f"{what}s must be > 0, not {text!r}")
    return list(dict.fromkeys(values))


@dataclass(frozen=True)
class SweepAxes:
    """What a sweep varies; each None means its default (fp32,int8; 1, 2, 4, ... cores; the
    target's power modes)."""
    precisions: list[str] | None = None
    threads: list[int] | None = None
    power_modes: list[str] | None = None


def sweep(project, target: str, device: str, axes: SweepAxes | None = None,
          build: BuildOptions | None = None, bench: BenchOptions | None = None, *,
          out=None, on_step: Step | None = None) -> SweepOutcome:
    """Build PROJECT per precision (``build``: backend, cache), then bench every point of
    precision x threads x power mode on DEVICE (``bench``), one result per point.
    ``out``: the parent directory of the builds."""
    from ... import api
    from ...options import resolve_backend
    from ...project import load_project
    from ...targets import load_target

    axes, build, bench = axes or SweepAxes(), build or BuildOptions(), bench or BenchOptions()
    precisions, threads, power_modes = axes.precisions, axes.threads, axes.power_modes
    backend, health = build.backend, bench.health
    on_step = on_step or (lambda step, msg: None)
    inv = load_inventory(bench.connection.inventory)
    dev = inv.get(device)
    if dev.target != target:
        raise ConfigError(f"device {dev.name} is a {dev.target}, not a {target}", hint=f"use --target {dev.target}")
    profile = load_target(target)
    backend = resolve_backend(profile, backend, load_project(project))[0]   # as each api.build resolves it
    profile.backend_config(backend)
    explicit = precisions is not None
    precisions = list(precisions or DEFAULT_PRECISIONS)
    threads = list(threads or default_threads(profile.hardware.cores))
    modes = list(power_modes if power_modes is not None else (profile.runtime.power_modes or [None]))
    if power_modes and profile.runtime.power_modes:
        unknown = [m for m in power_modes if m not in profile.runtime.power_modes]
        if unknown:
            raise ConfigError(f"power mode(s) {', '.join(unknown)} not in {target}'s runtime.power_modes "
                              f"({', '.join(profile.runtime.power_modes)})")
    outcome = SweepOutcome(new_id("sweep"), dev.name, target, backend, [])
    name = load_project(project).name
    if health:
        from ..link.health import HealthStore, skip_note

        entry = HealthStore(inv.path).unhealthy(dev.name)
        if entry:
            raise Unhealthy(dev.name, f"skipped: {skip_note(dev.name, entry)}")

    planned: dict[str, Path | None] = {}
    for prec in precisions:
        try:
            api.resolve_precision(profile, backend, prec)
        except ConfigError as exc:
            if explicit:
                raise
            outcome.notes.append(f"{prec} skipped: {exc.one_line()}")
            continue
        planned[prec] = (Path(out) / f"{name}-{target}-{backend}-{prec}") if out else None
    for dest in planned.values():       # build --out's rule for every build, before the first one runs
        if dest is not None:
            api.check_out_dir(dest)
    builds: dict[str, Path] = {}
    for prec, dest in planned.items():
        on_step("build", f"{name} {target} {backend} {prec}")
        res = api.build(project, target, build.model_copy(update={"precision": prec}),
                        out=dest,
                        on_event=lambda n, phase, info: on_step("build", f"{prec}: {n} {phase}"),  # noqa: B023
                        log=lambda msg: on_step("build", f"{prec}: {msg}"))  # noqa: B023 - used in this call
        if res.verify_status == "failed":
            outcome.verify_failed.append(prec)
            outcome.notes.append(f"{prec} not benched: verify failed ({res.manifest['verify'].get('reason')})")
            continue
        builds[prec] = res.out_dir
    if not builds:
        if outcome.verify_failed:
            return outcome
        raise ConfigError(f"nothing to sweep: {'; '.join(outcome.notes) or 'no precision'}")

    from ...api import read_manifest

    for prec, bdir in builds.items():
        for t in threads:
            for mode in modes:
                outcome.points.append(SweepPoint(prec, t, mode, bdir))
    manifests = {prec: read_manifest(b) for prec, b in builds.items()}
    # a point's threads and power mode are measurement options (BenchOptions.measure)
    settings = {id(p): resolve_settings(manifests[p.precision], dev, bench.model_copy(update={
                    "measure": bench.measure.model_copy(update={"threads": p.threads, "power_mode": p.power_mode})}))
                for p in outcome.points}
    n = len(outcome.points)

    def points():
        for i, p in enumerate(outcome.points):
            on_step("point", f"{i + 1} of {n}: {p.precision}, {p.threads} thread(s)"
                             + (f", {p.power_mode}" if p.power_mode else ""))
            tags = {"sweep": {"id": outcome.id, "index": i, "points": n,
                              "point": {"precision": p.precision, "threads": p.threads, "power_mode": p.power_mode}}}
            b = bench_class(dev)(p.build_dir, dev, settings[id(p)], bench, on_step=on_step, tags=tags)
            try:
                o = b.run()
            except DeviceError as exc:
                p.status, p.error = "failed", exc.one_line()
                for rest in outcome.points[i + 1:]:
                    rest.status = "not run"
                raise
            p.status, p.result, p.path = "ok", o.result, o.path

    try:
        guarded(inv.path, dev.name, points, enabled=health)
    except DeviceError as exc:
        outcome.error = exc
    return outcome
