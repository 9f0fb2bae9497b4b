"""edgeforge load: the throughput-latency curve of a build on a device, measured there.

The host side of the runner's ``load`` command. It is a bench in everything but what runs on
the device (:class:`LoadRun` is a :class:`~.bench.Bench`): the same inventory, host-key policy,
timeouts, connect retries, upload by digest, lease and health record. The load generator runs
on the device inside the runner, so SSH and the network are not measured:

- closed loop (default): K workers send requests back to back for ``duration_s``, over every
  concurrency x batch x threads, each with a shared session (K threads; onnxruntime's run()
  releases the GIL) and/or a session of their own (K processes);
- open loop (``rates``): Poisson arrivals at each rate, served by K workers (K: the largest
  concurrency); latency counts from the arrival, queueing included.

One ``edgeforge.load/1`` result per run (:mod:`edgeforge.results.load`), with the knees and the
SLO pick (:mod:`edgeforge.results.knee`). A failure part-way keeps the levels measured before
as an ``incomplete`` result, and raises the DeviceError (exit 4).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError
from ...options import BenchOptions
from ...report.gates import GateResult
from ...results.knee import analyse, figures, recommendation_line
from ...results.load import LOAD_SCHEMA, write_load_result
from ...runner.limits import (LOAD_MAX_ARRIVALS, LOAD_MAX_DURATION_S, LOAD_MAX_LEVELS, LOAD_MAX_RATE, LOAD_MAX_TOTAL_S, LOAD_MAX_WARMUP_S, LOAD_MAX_WORKERS, MAX_BATCH, MAX_THREADS, load_worker_cap)
from .bench import Bench, BenchOutcome, Step, guarded
from ..link.inventory import load_inventory
from ..link.settings import resolve_settings

SESSIONS_FOR = {"onnx": ("shared", "own"), "lite": ("own",)}
LEVEL_OVERHEAD_S = 3.0        # per level: session start, worker processes, a loaded device


MAX_SLO_MS = 3_600_000.0      # an hour: an SLO (and a p99 gate) beyond it is a typo


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _counts(values, flag: str, most: int, what: str) -> None:
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= most for v in values):
        raise ConfigError(f"{flag} needs {what} from 1 to {most}, not {','.join(map(str, values)) or 'none'}")


@dataclass(frozen=True)
class LoadPlan:
    """What to measure. ``threads`` None: the build's runtime threads. ``sessions`` None: every
    mode the runtime allows (onnxruntime: shared and own; Paddle Lite: own). ``force``: more
    workers than the device's default cap (4 per core, at least 8), up to LOAD_MAX_WORKERS."""

    concurrency: tuple[int, ...] = (1, 2, 4, 8)
    batch: tuple[int, ...] = (1,)
    threads: tuple[int | None, ...] = (None,)
    rates: tuple[float, ...] = ()
    sessions: tuple[str, ...] | None = None
    duration_s: float = 2.0
    warmup_s: float | None = None
    slo_p99_ms: float | None = None
    seed: int = 1
    force: bool = False

    def checked(self) -> LoadPlan:
        """The plan, or a ConfigError naming the flag: every number finite and in range, the
        open loop's arrivals per level bounded. The device's own cap is checked once it is known
        (:meth:`LoadRun.prepare`)."""
        _counts(self.concurrency, "--concurrency", LOAD_MAX_WORKERS, "worker counts")
        _counts(self.batch, "--batch", MAX_BATCH, "batch sizes")
        _counts([t for t in self.threads if t is not None] or [1], "--threads", MAX_THREADS, "thread counts")
        if not (_real(self.duration_s) and 0 < self.duration_s <= LOAD_MAX_DURATION_S):
            raise ConfigError(f"--duration must be seconds > 0, at most {LOAD_MAX_DURATION_S:g}, "
                              f"not {self.duration_s}")
        if self.warmup_s is not None and not (_real(self.warmup_s) and 0 <= self.warmup_s <= LOAD_MAX_WARMUP_S):
            raise ConfigError(f"--warmup must be seconds >= 0, at most {LOAD_MAX_WARMUP_S:g}, not {self.warmup_s}")
        if any(not (_real(r) and 0 < r <= LOAD_MAX_RATE) for r in self.rates):
            raise ConfigError(f"--rate needs rates > 0, at most {LOAD_MAX_RATE:g} requests/s, not "
                              f"{','.join(map(str, self.rates))}")
        span = self.warmup + self.duration_s
        if self.rates and max(self.rates) * span > LOAD_MAX_ARRIVALS:
            raise ConfigError(f"--rate {max(self.rates):g} for {span:g}s per level is over {LOAD_MAX_ARRIVALS} "
                              "arrivals a level", hint="lower --rate or --duration")
        if self.slo_p99_ms is not None and not (_real(self.slo_p99_ms) and 0 < self.slo_p99_ms <= MAX_SLO_MS):
            raise ConfigError(f"--slo-p99-ms must be milliseconds > 0, at most {MAX_SLO_MS:g}, "
                              f"not {self.slo_p99_ms}")
        bad = [s for s in self.sessions or () if s not in ("shared", "own")]
        if bad:
            raise ConfigError(f"--sessions: use shared, own or both, not {', '.join(bad)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed must be an integer, not {self.seed!r}")
        return self

    @property
    def warmup(self) -> float:
        return self.warmup_s if self.warmup_s is not None else max(0.1, min(1.0, self.duration_s / 4))

    def levels(self, backend: str, default_threads: int | None) -> list[dict]:
        allowed = SESSIONS_FOR.get(backend, ("own",))
        sessions = [s for s in (self.sessions or allowed) if s in allowed]
        if not sessions:
            raise ConfigError(f"--sessions {','.join(self.sessions or ())}: the {backend} runtime "
                              f"allows {' or '.join(allowed)} only",
                              hint="Paddle Lite predictors are not thread-safe: one per worker process")
        threads = [t if t is not None else default_threads for t in self.threads]
        out = []
        for s in sessions:
            for t in dict.fromkeys(threads):
                for b in dict.fromkeys(int(x) for x in self.batch):
                    if self.rates:
                        k = max(int(c) for c in self.concurrency)
                        out += [{"mode": "open", "sessions": s, "threads": t, "batch": b, "concurrency": k,
                                 "rate": float(r), "seed": self.seed} for r in self.rates]
                    else:
                        out += [{"mode": "closed", "sessions": s, "threads": t, "batch": b,
                                 "concurrency": int(c), "rate": None}
                                for c in sorted(dict.fromkeys(int(x) for x in self.concurrency))]
        return out

    def estimate_s(self, n_levels: int) -> float:
        per = self.warmup + self.duration_s * (2 if self.rates else 1) + LEVEL_OVERHEAD_S
        return n_levels * per + 30.0


class LoadRun(Bench):
    """One load run of one build on one device."""

    command = "load"

    def __init__(self, build_dir, device, settings, plan: LoadPlan, opts: BenchOptions | None = None,
                 **kw):
        super().__init__(build_dir, device, settings, opts, **kw)
        self.plan = plan.checked()
        self.levels = plan.levels(self.manifest["backend"], settings.threads)
        n, per = len(self.levels), plan.warmup + plan.duration_s
        if n > LOAD_MAX_LEVELS or n * per > LOAD_MAX_TOTAL_S:
            raise ConfigError(f"{n} levels of {per:g}s are over the limits ({LOAD_MAX_LEVELS} levels, "
                              f"{LOAD_MAX_TOTAL_S:g}s in all)", hint="use fewer levels or a shorter --duration")
        need = plan.estimate_s(len(self.levels))
        if need > settings.command_timeout_s:
            raise ConfigError(f"{len(self.levels)} levels of {plan.duration_s:g}s need about {need:.0f}s on "
                              f"the device, over the {settings.command_timeout_s:g}s timeout",
                              hint=f"raise --timeout to {need:.0f} or more, or use fewer levels")

    def spec(self, digests: dict[str, str]) -> dict:
        spec = super().spec(digests)
        for key in ("warmups", "runs", "drift", "runner", "benchmark_bin"):
            spec.pop(key, None)
        spec.update(levels=self.levels, duration_s=self.plan.duration_s, warmup_s=self.plan.warmup,
                    force=self.plan.force)
        return spec

    def prepare(self, tr, digests: dict[str, str]) -> dict:
        """The bench's file check, which also reads the device's cores and memory; then a level
        with more workers than the device holds is refused (ConfigError, exit 2) before anything
        is uploaded or started."""
        info = super().prepare(tr, digests)
        check_worker_cap(self.levels, info, self.manifest, self.plan.force, self.device.name)
        return info

    def on_line(self, line: str) -> None:
        ev = self.partial.feed(line)
        if not ev:
            return
        n = len(self.levels)
        if ev["event"] == "runtime":
            self.on_step("run", f"{ev.get('name')} {ev.get('version')}: {n} levels of "
                                f"{self.plan.duration_s:g}s")
        elif ev["event"] == "level":
            what = ev.get("skipped") or (figures(ev) if ev.get("p99_ms") is not None else "no request completed")
            self.on_step("run", f"level {ev.get('index', 0) + 1}/{n}: {recommendation_line_of(ev, what)}")

    def _phase(self) -> str:
        if self.partial.last == "level":
            return f"the load levels (after {len(self.level_events())} of {len(self.levels)})"
        return "the load levels" if self.partial.last in ("runtime", "fingerprint") else super()._phase()

    def level_events(self) -> list[dict]:
        return [{k: v for k, v in e.items() if k not in ("event", "index")}
                for e in self.partial.events if e.get("event") == "level"]

    def measured(self) -> bool:
        return bool(self.level_events())

    def result(self, status: str = "ok", error: str | None = None) -> dict:
        base = super().result(status, error)
        for key in ("samples_ms", "warmup_ms", "summary", "drift", "settings"):
            base.pop(key, None)
        s = self.settings
        levels = self.level_events()
        fp = base["device"]["fingerprint"]
        ran = next((lv.get("providers") for lv in levels if lv.get("providers")), None)
        if ran:
            base["runtime"]["providers"] = ran              # the execution providers that ran
        base.update(schema=LOAD_SCHEMA, levels=levels, analysis=analyse(levels, self.plan.slo_p99_ms),
                    emulated=fp.get("emulated"),
                    settings={"duration_s": self.plan.duration_s, "warmup_s": self.plan.warmup,
                              "mode": "open" if self.plan.rates else "closed",
                              "concurrency": list(self.plan.concurrency), "batch": list(self.plan.batch),
                              "threads": sorted({lv["threads"] for lv in self.levels}, key=str),
                              "rates": list(self.plan.rates), "sessions": sorted({lv["sessions"] for lv in self.levels}),
                              "execution_providers": (self.manifest.get("runtime") or {}).get("execution_providers"),
                              "connect_timeout_s": s.connect_timeout_s, "command_timeout_s": s.command_timeout_s})
        order = ["schema", "status", "created_at", "edgeforge_version", "emulated", "artifact", "build", "device",
                 "runtime", "runner_sha256", "settings", "levels", "analysis"]
        return {**{k: base[k] for k in order if k in base}, **{k: v for k, v in base.items() if k not in order}}

    def write(self, result: dict) -> Path:
        return write_load_result(self.results_dir, result)


def check_worker_cap(levels: list[dict], device_info: dict, manifest: dict, force: bool, name: str) -> None:
    """Refuse (ConfigError) a level with more concurrent workers than the device holds:
    :func:`~edgeforge.runner.limits.load_worker_cap` of its cores and available memory
    (``device_info``: what the file check read there), the artifact's size, ``force``."""
    art_mb = float((manifest.get("artifact") or {}).get("size_bytes") or 0) / 1e6
    cores, mem = device_info.get("cores"), device_info.get("mem_available_mb")
    for lv in levels:
        cap, why = load_worker_cap(lv["sessions"], cores, mem, art_mb, force=force)
        if lv["concurrency"] > cap:
            more = (f"; --force goes up to {LOAD_MAX_WORKERS}" if "default" in why
                    else ", or --sessions shared (threads of one process)" if "memory" in why else "")
            raise ConfigError(f"--concurrency {lv['concurrency']} ({lv['sessions']} sessions) is over what {name} "
                              f"holds: at most {cap}, {why}", hint=f"use --concurrency {cap} or less{more}")


def recommendation_line_of(level: dict, what: str) -> str:
    from ...results.knee import describe

    return f"{describe(level)}: {what}"


def load(build_dir, device: str, plan: LoadPlan, opts: BenchOptions | None = None, *,
         on_step: Step | None = None) -> BenchOutcome:
    """Measure BUILD_DIR's load curve on DEVICE (a name in the inventory) as ``plan`` says;
    ``opts``: timeouts, lease wait, retries, inventory, results directory, health, as for bench.
    Returns the result and where it was written. Raises ConfigError or DeviceError."""
    from ...api import read_manifest

    opts = opts or BenchOptions()
    manifest = read_manifest(build_dir)
    inv = load_inventory(opts.connection.inventory)
    dev = inv.get(device)
    settings = resolve_settings(manifest, dev, opts)
    settings.runner, settings.benchmark_bin = "python", None       # load needs the Python runtime
    run = LoadRun(build_dir, dev, settings, plan, opts, on_step=on_step)
    return guarded(inv.path, dev.name, run.run, enabled=opts.health)


# ---------------------------------------------------------------- gates

def load_gates(result: dict, min_throughput: float | None = None, max_p99_ms: float | None = None,
               force: bool = False) -> list[GateResult]:
    """``min_throughput`` (inf/s): the SLO pick's throughput when the run had an SLO, else the
    best error-free level's. ``max_p99_ms``: p99 at every open-loop rate. Emulated timings are
    refused (ConfigError) unless ``force``."""
    from ...report.pairing import label, short

    if (min_throughput, max_p99_ms) == (None, None):
        return []
    if result.get("emulated") and not force:
        raise ConfigError(f"load gates on an emulated device ({result['emulated']}): emulated timings are not "
                          "performance figures", hint="gate on a real device, or pass --force")
    levels = [lv for lv in result["levels"] if lv.get("p99_ms") is not None and not lv.get("skipped")]
    base = {"device": result["device"]["name"], "artifact_sha256": result["artifact"]["sha256"],
            "subject": f"{label(result)}@{short(result['artifact']['sha256'])}",
            "fingerprint": result["device"]["fingerprint"].get("cpu_model") or ""}
    out = []
    if min_throughput is not None:
        rec = (result.get("analysis") or {}).get("recommendation")
        if rec is not None:
            pick = levels_at(result, rec.get("level"))
            why = "at the SLO pick" if pick else f"no level meets the SLO ({rec['line']})"
        else:
            clean = [lv for lv in levels if not lv.get("errors")]
            pick = max(clean, key=lambda lv: lv["inferences_per_s"]) if clean else None
            why = "at the best error-free level" if pick else "no error-free level"
        got = pick["inferences_per_s"] if pick else None
        ok = got is not None and got >= min_throughput
        where = f" ({recommendation_line(pick)})" if pick else ""
        out.append(GateResult("min_throughput", passed=ok, measured=got, threshold=min_throughput,
                              message=(f"throughput {why}: {got:.4g} inf/s {'>=' if ok else '<'} "
                                       f"{min_throughput:g} required{where}" if got is not None else why), **base))
    if max_p99_ms is not None:
        open_levels = [lv for lv in levels if lv.get("mode") == "open"]
        if not open_levels:
            raise ConfigError("--max-p99-ms gates p99 at a given rate: pass --rate QPS,...")
        for lv in open_levels:
            ok = lv["p99_ms"] <= max_p99_ms and not lv.get("errors")
            b = dict(base, subject=f"{base['subject']} {recommendation_line_of(lv, '')[:-2]}")
            out.append(GateResult("max_p99_ms", passed=ok, measured=lv["p99_ms"], threshold=max_p99_ms,
                                  message=f"p99 {lv['p99_ms']:.4g} ms {'<=' if ok else '>'} {max_p99_ms:g} ms at "
                                          f"{lv['rate']:g} req/s" + (f", {lv['errors']} errors" if lv.get("errors") else ""),
                                  **b))
    return out


def levels_at(result: dict, index) -> dict | None:
    if isinstance(index, int) and 0 <= index < len(result["levels"]):
        return result["levels"][index]
    return None
