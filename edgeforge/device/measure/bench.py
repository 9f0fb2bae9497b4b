"""edgeforge bench: push a build to a device over SSH, measure latency and accuracy drift there.

1. read the build (manifest, artifact, reference data) and the device (inventory);
2. connect (host key checked), ask the device for the sha256 of what it already holds under
   ``<workdir>/<artifact sha256>/`` and whether it has numpy and the runtime;
3. upload only what is missing or differs (a temporary name, then a rename);
4. run the on-device runner, which checks every sha256 again before it loads anything, then
   times the artifact and measures drift on the evaluation set;
5. write one ``edgeforge.bench/1`` JSON under ``results/`` (atomic, never overwriting).

Steps 2-4 run under the device's lease (:mod:`.lease`): one bench per device at a time, across
processes and machines. A connect that fails in a way that may pass (refused, reset, timed out)
is tried again with exponential backoff (``retries`` more times). :func:`bench` also keeps the
device's health (:mod:`.health`): an unhealthy device is refused until ``devices check`` passes.

A failure raises DeviceError (exit 4) with one line naming the device and the cause; whatever was
measured before the failure is saved as a result with status "incomplete".
"""
from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ... import __version__
from ...errors import (ConfigError, DeviceError, Interrupted, RunnerCrashed, RunnerTimeout, RuntimeMissing)
from ...options import BenchOptions
from ...results.schema import SCHEMA, empty_drift, now_iso, write_result
from ...results.stats import summarize
from ...task.drift import drift_task, reduce_spec, wants_outputs
from ...stop_signals import signals_held_once
from ..link.interrupt import StopOnSignal, after_the_run, interrupted, stop_runner
from ..link.inventory import Device
from ..link.lease import Lease, iso
from ..link.settings import (
    RUNTIME_FOR_BACKEND,
    BenchSettings,
    build_files,
    check_results_dir,
    resolve_settings,  # noqa: F401 - sweep, fleet and deploy import it from here
    results_dir_of,
    runner_file,
    validate_build,
)
from .endtoend import e2e_files, e2e_result, e2e_spec, pipeline_of
from ..link.events import Partial, tail
from ..link.health import guarded  # noqa: F401 - its home was here: fleet, deploy and load import it from here
from .runner_errors import runner_error
from ..link import sync
from ..link.session import BACKOFF_S, Session
from ..link.transport import SSHTransport

DEADLINE_GRACE_S = 5.0


Step = Callable[[str, str], None]   # (step, message)


@dataclass
class BenchOutcome:
    result: dict
    path: Path


def _signal_name(n: int) -> str:
    import signal

    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


class Bench:
    """One bench of one build on one device. A subclass (``measure.load``) runs another runner
    ``command`` and overrides ``measured``, ``result`` and ``write``."""

    command = "bench"               # the runner's subcommand

    def __init__(self, build_dir, device: Device, settings: BenchSettings,
                 opts: BenchOptions | None = None, *, on_step: Step | None = None,
                 tags: dict | None = None, backoff_s: float = BACKOFF_S, remote_subdir: str | None = None):
        opts = opts or BenchOptions()
        self.remote_subdir = remote_subdir
        self.opts = opts
        from ...api import read_manifest

        self.wait_s = opts.connection.wait
        self.retries = opts.connection.retries
        self.backoff_s = float(backoff_s)
        self.tags = dict(tags or {})      # top-level keys added to the result (e.g. fleet, sweep)
        self.lease: Lease | None = None
        self.attempts = 0
        self.timing = {"started_at": None, "finished_at": None, "run_started_at": None, "run_finished_at": None}
        self.build_dir = Path(build_dir)
        self.manifest = read_manifest(self.build_dir)
        validate_build(self.build_dir, self.manifest)
        self.device = device
        self.settings = settings
        self.trust_new_host = opts.connection.trust_new_host
        self.results_dir = results_dir_of(opts)
        self.on_step = on_step or (lambda step, msg: None)
        self.partial = Partial()
        self.transfer = {"uploaded_bytes": 0, "seconds": 0.0, "files": [], "reused": []}
        self.remote_dir: str | None = None
        self.runner: tuple[str, str] | None = None    # the runner zipapp shipped: (its name, its sha256)
        self.held_info: dict = {}
        self.stopped_by: int | None = None      # the signal that stopped the run (interrupt.py)
        if device.target != self.manifest["target"]:
            raise ConfigError(f"device {device.name} is a {device.target}, the build in {build_dir} is for "
                              f"{self.manifest['target']}",
                              hint=f"build for it: edgeforge build PROJECT --target {device.target}")

    def error(self, cls: type[DeviceError], message, hint=None) -> DeviceError:
        return cls(self.device.name, message, hint=hint)

    # ------------------------------------------------------------ steps

    def local_digests(self, files: dict[str, Path]) -> dict[str, str]:
        return sync.local_digests(self.build_dir, self.manifest, files)

    def prepare(self, tr: SSHTransport, digests: dict[str, str]) -> dict:
        info = sync.prepare(tr, self.manifest, self.settings, digests,
                            self.remote_subdir or self.manifest["artifact"]["sha256"],
                            extra_modules=("PIL",) if self.opts.measure.end_to_end else ())
        self.remote_dir = info["dir"]
        self.held_info = info
        return info

    def upload(self, tr: SSHTransport, files: dict[str, Path], local: dict[str, str], held: dict) -> None:
        self.transfer = sync.upload(tr, files, local, held, self.remote_dir, timeout_s=self.settings.command_timeout_s,
                                    lease=self.lease, on_step=self.on_step)
        self.transfer["linked"] = list(self.held_info.get("linked") or [])
        sync.keep_by_digest(tr, self.manifest, self.settings, local, self.remote_subdir or self.manifest["artifact"]["sha256"],
                            self.transfer["files"])

    def sibling(self) -> dict | None:
        """The INT8 build's fp32 sibling (manifest ``float_artifact``) that this bench times in
        interleaved rounds with the artifact, or None (no sibling, benchmark_bin, --no-fp32-sibling)."""
        m, mo = self.manifest, self.opts.measure
        if (self.command != "bench" or m["precision"] != "int8" or not m.get("float_artifact")
                or self.settings.runner != "python" or not mo.fp32_sibling or mo.end_to_end):
            return None
        return m["float_artifact"]

    def spec(self, digests: dict[str, str]) -> dict:
        m, s = self.manifest, self.settings
        return {"files": digests, "artifact": {"path": m["artifact"]["path"], "sha256": m["artifact"]["sha256"]},
                "backend": m["backend"], "inputs": m["inputs"],
                "reference": {"inputs": m["reference"]["inputs"], "outputs": m["reference"]["outputs"]},
                "runtime": {**dict(m.get("runtime") or {}), "threads": s.threads, "power_mode": s.power_mode},
                "warmups": s.warmups, "runs": s.runs,
                "runner": s.runner, "benchmark_bin": s.benchmark_bin,
                "deadline_s": s.command_timeout_s + DEADLINE_GRACE_S, "drift": True,
                "return_outputs": wants_outputs(m), "reduce": reduce_spec(m),
                "postprocess": (((m.get("verify") or {}).get("task") or {}).get("settings") or {}).get("postprocess"),
                "end_to_end": e2e_spec(self.build_dir, m, s.runs) if self.opts.measure.end_to_end else None,
                "profile": self.opts.measure.profile,
                "baseline": {"path": self.sibling()["path"]} if self.sibling() else None,
                "lease": ({"dir": posixpath.join(posixpath.dirname(self.remote_dir), ".lease"), "token": self.lease.token}
                          if self.lease is not None and self.remote_dir else None)}

    def on_line(self, line: str) -> None:
        ev = self.partial.feed(line)
        if not ev:
            return
        name = ev["event"]
        msg = {"start": f"runner started (pid {ev.get('pid')})", "files": "sha256 checked on the device",
               "runtime": f"{ev.get('name')} {ev.get('version')}: timing "
                          f"({self.settings.warmups} warmups, {self.settings.runs} runs)",
               "latency": "end to end: decode, pre-process, infer, post-process per image"
                          if self.opts.measure.end_to_end else "evaluation set: accuracy drift",
               "end_to_end": "evaluation set: accuracy drift",
               "interleaving": f"INT8 and its fp32 sibling: {ev.get('rounds')} interleaved rounds",
               "int8_vs_fp32": "evaluation set: accuracy drift", "done": "done"}.get(name)
        if msg:
            self.on_step("run", msg)

    def run_remote(self, tr: SSHTransport, digests: dict[str, str]) -> None:
        s = self.settings
        name = runner_file(digests)
        self.runner = (name, digests[name])
        argv = [self.device.python, name, self.command, self.remote_dir, "--spec", json.dumps(self.spec(digests))]
        self.on_step("run", f"{name} on {self.device.name}")
        stop = StopOnSignal(lambda done: stop_runner(self, tr, done))
        try:
            with stop:
                r = tr.run(argv, cwd=self.remote_dir, timeout=s.command_timeout_s,
                           on_line=self.on_line, doing="running the bench")
        except KeyboardInterrupt:
            self._kill_remote(tr)
            raise
        except DeviceError:
            if stop.requested_at is None:
                raise
        if stop.requested_at is not None:       # a signal: the runner was stopped (interrupt.py)
            self.stopped_by = stop.signum
            raise Interrupted("interrupted")
        # Lines the callback missed (none, normally) are in the full stdout.
        if not self.partial.events:
            for line in r.stdout.splitlines():
                self.partial.feed(line)
        # The runner also ends itself (SIGALRM) at its own deadline, a little after ours; on a
        # loaded host that can come first: a run that failed after the timeout is a timeout.
        if r.timed_out or (r.exit_code != 0 and not r.connection_lost and r.seconds >= s.command_timeout_s):
            self._kill_remote(tr)
            raise self.error(RunnerTimeout, f"runner timed out after {s.command_timeout_s:g}s during {self._phase()}",
                             hint="raise --timeout, or lower --runs")
        self._raise_for_transport(r, f"running the bench (during {self._phase()})")
        err = self.partial.first("error")
        if err:             # build/usage: BuildInvalid (exit 2, not the device's fault)
            raise runner_error(self.device.name, self.build_dir, err)
        if r.exit_code != 0:
            if r.signal:
                raise self.error(RunnerCrashed, f"runner crashed ({_signal_name(r.signal)}) during {self._phase()}"
                                 + (f": {tail(r.stderr)}" if tail(r.stderr) else ""))
            if r.exit_code == 127:
                raise self.error(RuntimeMissing, f"python '{self.device.python}' not found on the device")
            raise self.error(RunnerCrashed, f"runner exited {r.exit_code} during {self._phase()}: {tail(r.stderr) or 'no message'}")
        if not self.partial.first("done"):
            raise self.error(RunnerCrashed, f"runner stopped without an error during {self._phase()}")

    def _kill_remote(self, tr: SSHTransport) -> None:
        """End the runner on the device (it also ends itself at its deadline)."""
        start = self.partial.first("start")
        if start and tr.is_connected():
            try:
                tr.run(["kill", "-TERM", str(int(start["pid"]))], timeout=10, doing="stopping the runner")
            except (DeviceError, KeyboardInterrupt):
                pass

    def _phase(self) -> str:
        return {"nothing": "start-up", "start": "the file check", "files": "runtime start-up",
                "fingerprint": "runtime start-up", "runtime": "the timed runs", "latency": "the drift pass",
                "interleaving": "the interleaved rounds (INT8 and fp32)", "int8_vs_fp32": "the drift pass",
                "drift": "shut-down"}.get(self.partial.last, self.partial.last)

    def _raise_for_transport(self, r, doing: str) -> None:
        sync.raise_for_transport(r, self.device, self.settings.command_timeout_s, doing)

    # ------------------------------------------------------------ result

    def result(self, status: str = "ok", error: str | None = None) -> dict:
        m, s, p = self.manifest, self.settings, self.partial
        lat = p.first("latency") or {}
        drift_ev = p.first("drift")
        before = p.fingerprint("before") or {}
        after = p.fingerprint("after") or {}
        fp = {k: v for k, v in before.items() if k not in ("temp_c", "load_avg")}
        fp.update(temp_c_before=before.get("temp_c"), temp_c_after=after.get("temp_c"),
                  load_avg=before.get("load_avg"), load_avg_after=after.get("load_avg"))
        for k in ("cpu_model", "kernel", "governor"):
            fp.setdefault(k, None)
        runtime = dict(lat.get("runtime") or p.first("runtime") or {})
        runtime.pop("event", None)
        runtime.setdefault("name", RUNTIME_FOR_BACKEND.get(m["backend"]) if s.runner == "python" else "paddlelite-benchmark_bin")
        runtime.setdefault("version", None)
        if drift_ev and "skipped" not in drift_ev:
            drift = {k: v for k, v in drift_ev.items() if k != "event"}
        else:
            drift = empty_drift(drift_ev.get("skipped") if drift_ev else "not measured")
        if wants_outputs(m) and drift_ev and "skipped" not in drift_ev:
            drift["task"] = drift_task(self.build_dir, m, p.first("outputs"))
        samples = list(lat.get("samples_ms") or [])
        rt = m.get("runtime") or {}
        v = m.get("verify") or {}
        result = {
            "schema": SCHEMA,
            "status": status,
            "created_at": now_iso(),
            "edgeforge_version": __version__,
            "artifact": {"sha256": m["artifact"]["sha256"], "name": m.get("name"), "path": m["artifact"]["path"],
                         "size_bytes": m["artifact"].get("size_bytes"), "float_size_bytes": m.get("float_size_bytes"),
                         "target": m["target"],
                         "backend": m["backend"], "precision": m["precision"]},
            "build": {"dir": str(self.build_dir.resolve()), "created_at": m.get("created_at"),
                      "host_verify": {k: v.get(k) for k in ("status", "top1_agreement", "accuracy", "float_accuracy",
                                                            "accuracy_drop", "max_abs_error", "cosine")}},
            "device": {"name": self.device.name, "host": self.device.host, "port": self.device.port,
                       "user": self.device.user, "target": self.device.target, "tags": list(self.device.tags),
                       "remote_dir": self.remote_dir, "fingerprint": fp,
                       **({"lab": self.device.lab.model_dump()} if self.device.lab else {})},
            "runtime": runtime,
            "runner_sha256": self.runner[1] if self.runner else None,    # the zipapp that measured
            "settings": {"warmups": lat.get("warmups", 0), "warmups_requested": s.warmups,
                         "warmup_stable": lat.get("warmup_stable"), "runs": s.runs,
                         # what the device's runtime applied (the runner's record), else what was asked
                         "threads": (runtime.get("applied") or {}).get("threads", s.threads),
                         "power_mode": (runtime.get("applied") or {}).get(
                             "power_mode", s.power_mode if m["backend"] == "lite" else None),
                         "execution_providers": rt.get("execution_providers"),
                         "runner": s.runner, "batch": lat.get("batch", 1),
                         "connect_timeout_s": s.connect_timeout_s, "command_timeout_s": s.command_timeout_s},
            "samples_ms": samples,
            "warmup_ms": list(lat.get("warmup_ms") or []),
            "summary": summarize(samples, lat.get("peak_rss_mb")),
            "drift": drift,
            "transfer": dict(self.transfer),
            "timing": self._timing(),
            "lease": self.lease.record() if self.lease is not None else None,
            "connect": {"attempts": self.attempts, "retries_allowed": self.retries},
        }
        e2e = e2e_result(p.first("end_to_end"))
        if e2e:
            result["end_to_end"] = e2e
        pair = p.first("int8_vs_fp32")
        if pair:                    # the verdict's samples: this device, interleaved rounds
            result["int8_vs_fp32"] = {k: v for k, v in pair.items() if k != "event"} | {
                "fp32_sha256": (m.get("float_artifact") or {}).get("sha256"), "where": "device"}
        prof = p.first("profile")
        if prof:
            result["profile"] = {k: v for k, v in prof.items() if k != "event"}
        for key, value in self.tags.items():
            result.setdefault(key, value)
        if error:
            result["error"] = error
        return result

    def _timing(self) -> dict:
        """Wall times (UTC, microseconds): the bench on the host, the runner on the device."""
        t = dict(self.timing)
        start, done = self.partial.first("start") or {}, self.partial.first("done") or {}
        t["run_started_at"] = iso(start.get("time")) if isinstance(start.get("time"), (int, float)) else None
        t["run_finished_at"] = iso(done.get("time")) if isinstance(done.get("time"), (int, float)) else None
        return t

    def save_partial(self, exc: DeviceError) -> DeviceError:
        """Keep what was measured before a failure; returns the error to raise."""
        if not self.measured():
            return exc
        try:
            path = self.write(self.result("incomplete", exc.message))
        except Exception:  # noqa: BLE001 - never hide the device error behind a write error
            return exc
        hint = f"{exc.hint}; " if exc.hint else ""
        return exc.restate(hint=f"{hint}what was measured is in {path}")

    # ------------------------------------------------------------ all of it

    def session(self) -> Session:
        """The device session of this run (:class:`.session.Session`): connect with retries,
        the lease for the command timeout."""
        what = f"edgeforge {self.command} {self.manifest.get('name') or 'model'}@{self.manifest['artifact']['sha256'][:12]}"
        return Session(self.device, self.opts.connection, connect_timeout_s=self.settings.connect_timeout_s,
                       command_timeout_s=self.settings.command_timeout_s, what=what, on_step=self.on_step,
                       backoff_s=self.backoff_s)

    def connect(self) -> SSHTransport:
        """Open the SSH connection alone (:meth:`.session.Session.connect`: retries with
        exponential backoff); ``attempts`` counts the tries."""
        ses = self.session()
        try:
            return ses.connect()
        finally:
            self.attempts = ses.attempts

    def run(self) -> BenchOutcome:
        check_results_dir(self.results_dir)
        files = build_files(self.build_dir, self.manifest)
        if self.sibling():
            files[self.sibling()["path"]] = self.build_dir / self.sibling()["path"]
        if self.opts.measure.end_to_end:
            pipeline_of(self.build_dir)
            files.update(e2e_files(self.build_dir, self.manifest))
        digests = self.local_digests(files)
        self.timing["started_at"] = iso(time.time())
        self.on_step("connect", f"{self.device.name} ({self.device.address})")
        # once the runner has measured, a stop signal waits for the lease's release and the
        # result's write, then exits 130 (during the run, StopOnSignal stops the runner)
        with signals_held_once(self.measured) as held:
            outcome = self._run_session(files, digests)
        if held:
            raise after_the_run(self.command, self.device.name, held[0], outcome.path)
        return outcome

    def _run_session(self, files: dict[str, Path], digests: dict[str, str]) -> BenchOutcome:
        ses = self.session()
        try:
            with ses:
                self.attempts, self.lease, tr = ses.attempts, ses.lease, ses.tr
                self.on_step("check", f"sha256 of the files under {self.device.workdir}/{self.manifest['artifact']['sha256'][:12]}…")
                info = self.prepare(tr, digests)
                self.upload(tr, files, digests, info["digests"])
                self.lease.renew()
                try:
                    self.run_remote(tr, digests)
                except DeviceError as exc:
                    self.lease.release()
                    self.timing["finished_at"] = iso(time.time())
                    raise self.save_partial(exc) from None
                except Interrupted:
                    self.lease.release()
                    self.timing["finished_at"] = iso(time.time())
                    raise interrupted(self, self.stopped_by) from None
        finally:
            self.attempts = ses.attempts
        self.timing["finished_at"] = iso(time.time())
        result = self.result()
        path = self.write(result)
        return BenchOutcome(result, path)

    def measured(self) -> bool:
        """Whether the runner reported a figure worth keeping in an incomplete result."""
        lat = self.partial.first("latency") or {}
        return bool(lat.get("samples_ms") or self.partial.first("drift"))

    def progress(self) -> str:
        """How far the run got, for the message of an interrupted one: "after 3 of 100 timed
        runs", else "during <phase>" (a subclass that measures something else may override it;
        LoadRun's phase already counts its levels)."""
        lat = self.partial.first("latency")
        if lat is not None:
            return f"after {len(lat.get('samples_ms') or [])} of {self.settings.runs} timed runs"
        return f"during {self._phase()}"

    def write(self, result: dict) -> Path:
        return write_result(self.results_dir, result)
