"""A bench on a browser device (``transport = "browser"``): the build in a local headless Chromium.

1. check the build as every bench does (manifest, the artifact's sha256) and onnxruntime-web's
   files against the digests ``toolchain install web`` recorded;
2. serve the runner page, onnxruntime-web, the artifact and the reference inputs from a loopback
   server with COOP/COEP (:mod:`edgeforge.device.browser.serve`), and open the page in a fresh
   headless Chromium (:mod:`edgeforge.device.browser.chromium`);
3. read the page's events (start, fingerprint, runtime, latency, evaluation, done) as the SSH
   runner's: the result is made by :meth:`Bench.result`, the drift by the runner's own
   ``drift_metrics`` over the outputs the page computed, and written as ``edgeforge.bench/1``.

The whole run has one deadline (``connect_timeout_s`` for the browser's start and the page's load,
plus ``command_timeout_s``): there the page is asked to stop, what it measured is kept as an
``-incomplete`` result, and the bench ends with exit 4 (:class:`RunnerTimeout`); a page that
cannot answer has its browser's process group killed 15 s later. A page error (not cross-origin isolated while threads > 1, a
wasm abort, a failed session) is exit 4 with its message (:class:`RunnerCrashed`). SIGINT,
SIGTERM and SIGHUP ask the page to stop after the run in progress, keep what was measured as an
``-incomplete`` result, and exit 130; the browser never outlives the verb.
"""
from __future__ import annotations

import base64
import binascii
import json
import re
import time
from pathlib import Path

import numpy as np

from ...errors import ConfigError, DeviceError, RunnerCrashed, RunnerTimeout
from ...runner.device_facts import fingerprint
from ...runner.metrics import DRIFT_BATCH, OUTPUTS_MAX_BYTES, drift_metrics, jsonable, packed_outputs
from ...runner.postprocess import postprocess
from ...runner.reference import load_npz, load_reference
from ...task.drift import wants_outputs
from ...toolchain_web import ENTRY, require_web
from ..link.interrupt import StopOnSignal, interrupted
from ..link.lease import iso
from ..link.settings import build_files, check_results_dir
from ..browser.chromium import Chromium
from ..browser.serve import LoopbackServer, Resource, resource_for
from .bench import Bench, BenchOutcome

PAGE = Path(__file__).resolve().parents[1] / "browser" / "page"
POLL_S = 0.2
STOP_GRACE_S = 10.0
DTYPES = ("float32", "float64", "int32", "int64", "uint8", "int8", "bool")
OUTPUTS_MAX_CHARS = 96 << 20        # base64 of the evaluation outputs the page may send back


class BrowserBench(Bench):
    """One bench of one build in a local headless Chromium (a :class:`Bench` whose runner is a
    page)."""

    _total_s = 0.0

    def page_table(self, web) -> tuple[dict[str, Resource], dict]:
        """What the server serves, and the page's spec."""
        m, s = self.manifest, self.settings
        data = load_npz(str(self.build_dir), m["reference"]["inputs"])
        inputs, table = [], {}
        for i, inp in enumerate(m["inputs"]):
            arr = data.get(inp["name"])
            if arr is None or str(arr.dtype) not in DTYPES:
                have = "missing" if arr is None else str(arr.dtype)
                raise ConfigError(f"{self.build_dir}: input {inp['name']} is {have} in the reference; "
                                  f"the page feeds {', '.join(DTYPES)}", hint="rebuild with `edgeforge build`")
            arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
            rel = f"inputs/{i}.bin"
            table["/" + rel] = resource_for(rel, data=arr.tobytes())
            inputs.append({"name": inp["name"], "shape": list(arr.shape), "dtype": str(arr.dtype), "file": rel})
        spec = {"entry": ENTRY, "threads": int(s.threads or 1), "artifact": m["artifact"]["path"],
                "warmups": s.warmups, "runs": int(s.runs), "samples": int(len(arr)),
                "drift_batch": DRIFT_BATCH, "drift": True, "inputs": inputs,
                "outputs_max_bytes": OUTPUTS_MAX_BYTES}
        table.update({"/": resource_for("runner.html", file=PAGE / "runner.html"),
                      "/runner.js": resource_for("runner.js", file=PAGE / "runner.js"),
                      "/spec.json": resource_for("spec.json", data=json.dumps(spec).encode()),
                      "/" + m["artifact"]["path"]: resource_for("model.onnx",
                                                                file=self.build_dir / m["artifact"]["path"])})
        for name in web.files:
            table[f"/ort/{name}"] = resource_for(name, file=web.path(name))
        return table, spec

    # ------------------------------------------------------------ events

    def take(self, ch: Chromium) -> list[dict]:
        got = ch.driver.execute_script("return window.__ef ? window.__ef.take() : [];")
        return got if isinstance(got, list) else []

    def handle(self, ev: dict, host_fp: dict) -> None:
        """One page event into the run's events (the SSH runner's names)."""
        name = ev.get("event")
        if name == "stopped":       # asked to stop during the drift pass: nothing more to keep
            return
        if name == "fingerprint":
            host_fp.update(ev.get("fingerprint") or {})
            return
        if name == "evaluation":
            self.evaluation(ev)
            return
        if name == "latency":
            self.partial.events.append({"event": "fingerprint", "when": "after", "fingerprint": fingerprint()})
        self.partial.events.append(ev)
        msg = {"start": "page started", "files": "artifact and inputs fetched by the page",
               "runtime": f"onnxruntime-web {ev.get('version')}, {ev.get('threads')} thread(s): timing "
                          f"({self.settings.warmups} warmups, {self.settings.runs} runs)",
               "latency": "stopped" if ev.get("interrupted") else "evaluation set: accuracy drift",
               "done": "done"}.get(name)
        if msg:
            self.on_step("run", msg)

    def outputs_of(self, ev: dict) -> list[np.ndarray]:
        """The evaluation outputs the page sent (base64 of little-endian arrays), parsed."""
        outs = []
        try:
            for o in ev.get("outputs") or []:
                dtype = o.get("dtype")
                if dtype not in DTYPES or not isinstance(o.get("data"), str) or len(o["data"]) > OUTPUTS_MAX_CHARS:
                    raise ValueError(f"an output of type {dtype}")
                arr = np.frombuffer(base64.b64decode(o["data"]), dtype=np.dtype(dtype).newbyteorder("<"))
                outs.append(arr.reshape([int(d) for d in o["shape"]]).astype(dtype))
        except (ValueError, TypeError, KeyError, binascii.Error) as exc:
            raise self.error(RunnerCrashed, f"the page's evaluation outputs do not parse ({exc})") from None
        return outs

    def evaluation(self, ev: dict) -> None:
        """The page's evaluation outputs: drift by the runner's code, as its ``drift`` event."""
        if ev.get("skipped"):
            self.partial.events.append({"event": "drift", "skipped": str(ev["skipped"])})
            return
        outs = self.outputs_of(ev)
        _, ref, labels = load_reference(str(self.build_dir), self.manifest)
        m = {k: jsonable(v) for k, v in drift_metrics(outs, ref, labels).items()}
        self.partial.events.append({"event": "drift", "samples": int(ev.get("samples") or 0),
                                    "batch": int(ev.get("batch") or DRIFT_BATCH), **m})
        if wants_outputs(self.manifest):
            post = (((self.manifest.get("verify") or {}).get("task") or {}).get("settings") or {}).get("postprocess")
            answers = post is not None and post.get("op", "none") != "none"
            packed, why = packed_outputs(postprocess(outs, post) if answers else outs)
            self.partial.events.append({"event": "outputs", "npz": packed, "answers": answers,
                                        **({"skipped": why} if packed is None else {})})

    def _phase(self) -> str:
        return {"nothing": "the browser's start", "fingerprint": "the page's load", "start": "the page's load",
                "files": "runtime start-up", "runtime": "the timed runs", "latency": "the drift pass",
                "drift": "shut-down"}.get(self.partial.last, self.partial.last)

    # ------------------------------------------------------------ the run

    def poll(self, ch: Chromium, stop: StopOnSignal, host_fp: dict, deadline_at: float) -> None:
        """Read the page's events until it is done, fails or is stopped. A signal, or the deadline
        (``deadline_at``, monotonic), asks the page to stop after the run in progress: its samples
        so far come back (kept as an incomplete result), then the signal is reported, or the
        deadline as RunnerTimeout. The watchdog kills a page that cannot answer."""
        asked_at, why, phase = None, None, None
        while True:
            if ch.killed_at_deadline:
                raise RuntimeError("the deadline passed")
            for ev in self.take(ch):
                if ev.get("event") == "error":
                    self.partial.events.append(ev)
                    raise self.error(RunnerCrashed, f"the page failed during {self._phase()}: "
                                     f"{page_message(ev.get('message'))}")
                self.handle(ev, host_fp)
                if ev.get("event") in ("done", "stopped") or (ev.get("event") == "latency" and ev.get("interrupted")):
                    why = why if ev.get("event") != "done" else None
                    break
            else:
                now = time.monotonic()
                if why is None and (stop.requested_at is not None or now >= deadline_at):
                    why = "signal" if stop.requested_at is not None else "deadline"
                    asked_at, phase = now, self._phase()
                if why is not None:         # again each time: a page still loading has no __ef yet
                    ch.driver.execute_script("if (window.__ef) window.__ef.stop();")
                if asked_at is None or now - asked_at <= STOP_GRACE_S:
                    time.sleep(POLL_S)
                    continue
            if why == "deadline":
                raise self.error(RunnerTimeout, f"the page did not finish within {self._total_s:g}s "
                                 f"(during {phase})", hint="raise --timeout, or lower --runs")
            return

    def run(self) -> BenchOutcome:
        for flag, on in (("--end-to-end", self.opts.measure.end_to_end), ("--profile", self.opts.measure.profile)):
            if on:
                raise ConfigError(f"{flag} runs the device runner's Python stages; {self.device.name} is a browser",
                                  hint="bench it without the flag, or on an SSH device")
        check_results_dir(self.results_dir)
        self.local_digests(build_files(self.build_dir, self.manifest))   # the artifact is its manifest's
        web = require_web()
        table, _ = self.page_table(web)
        s = self.settings
        total_s = self._total_s = s.connect_timeout_s + s.command_timeout_s
        self.timing["started_at"] = iso(time.time())
        host_fp = fingerprint()
        self.partial.events.append({"event": "fingerprint", "when": "before", "fingerprint": host_fp})
        stop = StopOnSignal(lambda done: None)       # the poll loop sees stop.requested_at
        # the page-load timeout and the watchdog never come before the deadline, which names the phase
        hard_s = total_s + STOP_GRACE_S + 5
        ch = Chromium(self.device.browser, self.device.driver, load_timeout_s=hard_s)
        try:
            with stop, LoopbackServer(table, isolate=self.device.isolate) as srv:
                self.on_step("connect", f"{self.device.name}: headless Chromium, page at {srv.url}")
                self.remote_dir = srv.url
                deadline_at = time.monotonic() + total_s
                ch.deadline(hard_s)                     # from here on: the browser's start included
                try:
                    ch.start()
                except RuntimeError as exc:
                    if ch.killed_at_deadline:
                        raise self.error(RunnerTimeout, f"chromium did not start within {hard_s:g}s") from None
                    raise self.error(RunnerCrashed, str(exc), hint="check `chromium --version` and "
                                     "`chromedriver --version` (the same major version)") from None
                host_fp.update(browser=f"Chromium {ch.version} (headless)", browser_version=ch.version,
                               chromedriver=ch.driver_version, isolation_headers=self.device.isolate)
                t0 = time.monotonic()
                try:
                    ch.driver.get(srv.url + "/")
                    self.poll(ch, stop, host_fp, deadline_at)
                except DeviceError:
                    raise
                except Exception as exc:  # noqa: BLE001 - selenium/urllib3 errors of a killed or lost browser
                    if ch.killed_at_deadline:
                        raise self.error(RunnerTimeout, f"the page did not finish within {hard_s:g}s "
                                         f"(during {self._phase()})", hint="raise --timeout, or lower --runs") from None
                    if stop.requested_at is None:
                        raise self.error(RunnerCrashed, f"the browser session ended during {self._phase()}: "
                                         f"{_one_line(exc)}") from None
                served = sorted(set(srv.requests) & set(table))
                self.transfer = {"uploaded_bytes": sum(len(table[p].body()) for p in served),
                                 "seconds": round(time.monotonic() - t0, 3), "files": served, "reused": [],
                                 "served_over": "loopback HTTP"}
        except DeviceError as exc:
            self.timing["finished_at"] = iso(time.time())
            raise self.save_partial(exc) from None
        finally:
            ch.close()
        self.timing["finished_at"] = iso(time.time())
        if stop.requested_at is not None:
            raise interrupted(self, stop.signum) from None
        result = self.result()
        result["device"]["transport"] = "browser"
        result["settings"]["runner"] = "browser"
        return BenchOutcome(result, self.write(result))


def page_message(text) -> str:
    """A page's error in one short line: onnxruntime-web's ``failed to call OrtRun(). ERROR_CODE: 2,
    ERROR_MESSAGE: /path/op_kernel.cc:87 ... [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : why``
    becomes ``OrtRun failed: INVALID_ARGUMENT: why``."""
    text = " ".join(str(text or "no message").split())
    m = re.match(r"failed to call (\w+)\(\)\. ERROR_CODE: \d+, ERROR_MESSAGE: (.*)", text)
    if m:
        why = m.group(2)
        if "[ONNXRuntimeError]" in why:
            parts = [p.strip() for p in why.split("[ONNXRuntimeError]", 1)[1].split(" : ") if p.strip()]
            why = ": ".join(parts[1:]) if len(parts) > 1 else why
        text = f"{m.group(1)} failed: {why}"
    return text if len(text) <= 240 else text[:237] + "..."


def _one_line(exc: BaseException) -> str:
    text = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:200]


__all__ = ["BrowserBench"]
