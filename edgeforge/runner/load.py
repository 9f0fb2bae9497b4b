"""``load DIR --spec JSON``: closed- or open-loop load levels over worker threads or processes,
each level's latency percentiles, throughput, CPU and memory as one event."""
from __future__ import annotations

import os
import sys
import time

try:
    import numpy as np
except ImportError:  # probe still reports the device; bench says numpy is missing
    np = None

from .device_facts import dist_version, fingerprint, peak_rss_mb, read_file, temperature_c
from .limits import refuse_spec
from .predictors import ENGINE_CACHE, lite_predictor, onnx_predictor
from .protocol import EXIT_DIGEST, EXIT_OK, EXIT_RUNTIME_MISSING, RUNNER_VERSION, RuntimeMissing, import_runtime, interruptible, needed_runtime, note_in_lease, check_files, emit, spec_command
from .reference import load_reference


# ---------------------------------------------------------------- load (closed and open loop)
#
# ``load DIR --spec JSON``: the load generator, on the device. Per level of the spec
# (mode closed|open, sessions shared|own, threads, batch, concurrency, rate): warm up for
# warmup_s, then measure for duration_s. Closed loop: K workers send requests back to back.
# Open loop: Poisson arrivals at ``rate`` per second; latency counts from the arrival, so it
# includes queueing. ``shared``: one session, K threads calling run() (onnxruntime's run() is
# thread-safe and releases the GIL); ``own``: K processes, a session each. Spinning is turned
# off (session.intra_op.allow_spinning=0) whenever more than one request runs at a time.
# Events: start, files, fingerprint (before), level (one per level), fingerprint (after), done.
# Open-loop arrivals are made one at a time (_Arrivals): memory is constant in the rate and the
# duration. A spec over the limits above is refused before anything runs (exit 2). SIGTERM or
# SIGINT: the level in progress is dropped and its workers ended, then error (interrupted), exit 130.

LOAD_MAX_SAMPLES = 4000       # raw latencies kept per level (evenly spaced); figures use all


def _cpu_jiffies():
    """(busy, total) from /proc/stat's first line, or None where there is no /proc/stat."""
    lines = (read_file("/proc/stat") or "").splitlines()
    if not lines or not lines[0].startswith("cpu "):
        return None
    v = [int(x) for x in lines[0].split()[1:9]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return sum(v) - idle, sum(v)


def _rss_mb(pid):
    for line in (read_file("/proc/%d/status" % pid) or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


class _RssWatch:
    """Peak of the summed RSS of ``pids``, sampled every 0.1 s on a daemon thread."""

    def __init__(self, pids):
        import threading
        self.pids, self.peak, self.stop = list(pids), 0.0, threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            self.peak = max(self.peak, sum(_rss_mb(p) for p in self.pids))
            if self.stop.wait(0.1):
                return

    def done(self):
        self.stop.set()
        self.thread.join()
        return round(self.peak, 2) if self.peak else peak_rss_mb()


def _load_feeds(feeds, batch):
    """The first ``batch`` evaluation samples (repeated when the set is smaller)."""
    out = {}
    for k, v in feeds.items():
        idx = np.arange(batch) % len(v)
        out[k] = np.ascontiguousarray(v[idx])
    return out


def _load_call(spec, build_dir, threads, spinning, feeds):
    """A zero-argument function that runs one inference on a session of its own."""
    model = os.path.join(build_dir, spec["artifact"]["path"])
    if spec["backend"] == "onnx":      # the build's providers and options, as bench uses them
        rt = spec.get("runtime", {})
        sess = onnx_predictor(model, threads, rt.get("execution_providers"), rt.get("provider_options"),
                              os.path.join(build_dir, ENGINE_CACHE), spinning=spinning).session
        feed = {i.name: feeds[i.name] for i in sess.get_inputs()}
        run = sess.run

        def call():
            return run(None, feed)
        call.providers = sess.get_providers()       # the execution providers that took the session
        return call
    names = [i["name"] for i in spec["inputs"]]
    pred = lite_predictor(model, threads, spec.get("runtime", {}).get("power_mode"), names)
    return lambda: pred(feeds)


def _work(call, t_measure, t_end, arrivals=None, drain_s=0.0, stop=None):
    """One worker's loop. Closed (no ``arrivals``): back to back until ``t_end``. Open: serve the
    arrival times ``arrivals.take()`` hands out (an :class:`_Arrivals`, shared by the workers of a
    session) until they run out, or until the queue is ``drain_s`` behind. ``stop`` (an Event):
    leave after the request in progress. Latencies (s) of requests from ``t_measure`` on."""
    clock, lat, errors, first_error, last = time.perf_counter, [], 0, None, None
    while stop is None or not stop.is_set():
        if arrivals is None:
            t0 = clock()
            if t0 >= t_end:
                break
            start = t0
        else:
            start = arrivals.take()
            if start is None:
                break
            t0 = clock()
            if t0 < start:
                if stop is not None:
                    if stop.wait(start - t0):
                        break
                else:
                    time.sleep(start - t0)
            elif t0 - start > drain_s:
                break
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - a failed run is counted, not a crash
            errors += 1 if start >= t_measure else 0
            first_error = first_error or "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:200]
                                                     if str(exc) else "")
            continue
        last = clock()
        if start >= t_measure:
            lat.append(last - start)
    return {"lat": lat, "errors": errors, "error": first_error, "last": last}


def _poisson(rate, t0, t_end, seed):
    """Poisson arrival times at ``rate`` per second after ``t0``, before ``t_end``: a generator, so
    memory does not grow with the rate or the duration."""
    import random
    rng, t = random.Random(seed), t0
    while True:
        t += rng.expovariate(rate)
        if t >= t_end:
            return
        yield t


class _Arrivals:
    """The open loop's queue: :func:`_poisson` times handed out one at a time, in order, to the
    threads that share it. ``offered``: the arrivals from ``t_measure`` on; :meth:`finish` counts
    the ones no worker took (it left when the queue fell ``drain_s`` behind)."""

    def __init__(self, rate, t0, t_end, seed, t_measure=None):
        import threading
        self._next = _poisson(float(rate), t0, t_end, seed).__next__
        self.t_measure = t0 if t_measure is None else t_measure
        self.offered, self._done, self._lock = 0, False, threading.Lock()

    def take(self):
        with self._lock:
            if self._done:
                return None
            try:
                t = self._next()
            except StopIteration:
                self._done = True
                return None
            if t >= self.t_measure:
                self.offered += 1
            return t

    def finish(self):
        while self.take() is not None:
            pass
        return self.offered


def _load_threads(call, level, t0, warmup_s, duration_s, stop):
    """K threads on one shared session; open loop: one FIFO queue of Poisson arrivals."""
    import threading
    k, rate = int(level["concurrency"]), level.get("rate")
    t_measure, t_end = t0 + warmup_s, t0 + warmup_s + duration_s
    arrivals = _Arrivals(rate, t0, t_end, level.get("seed", 1), t_measure) if rate else None
    out = [None] * k

    def worker(i):
        out[i] = _work(call, t_measure, t_end, arrivals, duration_s, stop)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(k)]
    for t in threads:
        t.start()
    return threads, out, arrivals


def _child_signals():
    """In a worker process: SIGTERM and SIGINT end it at once (the runner's handlers are the
    parent's), and it dies with the runner (Linux: PR_SET_PDEATHSIG), so none is left behind."""
    import signal
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))       # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _load_child(conn, spec, build_dir, level, feeds, index):
    """A worker process: its own session, its own Poisson stream (rate / K) in open loop."""
    _child_signals()
    try:
        call = _load_call(spec, build_dir, level["threads"], level["spinning"], feeds)
        call()
        conn.send("ready")
        t0, warmup_s, duration_s = conn.recv()
        t_end = t0 + warmup_s + duration_s
        arrivals = None
        if level.get("rate"):
            arrivals = _Arrivals(float(level["rate"]) / int(level["concurrency"]), t0, t_end,
                                 (level.get("seed", 1) * 1000003 + index), t0 + warmup_s)
        res = _work(call, t0 + warmup_s, t_end, arrivals, duration_s)
        res["providers"] = getattr(call, "providers", None)
        res["offered"] = arrivals.finish() if arrivals is not None else None
        conn.send(res)
    except Exception as exc:  # noqa: BLE001
        conn.send({"fatal": "%s: %s" % (type(exc).__name__, exc)})
    conn.close()


def _load_processes(spec, build_dir, level, feeds, warmup_s, duration_s, procs):
    """Start K worker processes (appended to ``procs`` as they start, so that the caller can end
    them whatever happens); returns their pipes and the common start time."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    k = int(level["concurrency"])
    pipes = []
    for i in range(k):
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=_load_child, args=(theirs, spec, build_dir, level, feeds, i), daemon=True)
        p.start()
        procs.append(p)
        theirs.close()
        pipes.append(mine)
    fatal = None
    for c in pipes:
        msg = c.recv() if c.poll(120) else {"fatal": "a worker did not start within 120 s"}
        if msg != "ready":
            fatal = fatal or msg.get("fatal")
    if fatal:
        raise RuntimeError("load worker failed to start: %s" % fatal)
    t0 = time.perf_counter() + 0.05
    for c in pipes:
        c.send((t0, warmup_s, duration_s))
    return pipes, t0


def _end_workers(procs, threads, stop):
    """Stop a level's workers (the runner was stopped, or failed): threads leave after the run in
    progress, processes are terminated, then killed; another signal meanwhile is ignored."""
    import signal
    sigs = (signal.SIGTERM, signal.SIGINT)
    before = [signal.signal(sig, signal.SIG_IGN) for sig in sigs]
    stop.set()
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 2.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    for sig, handler in zip(sigs, before):
        signal.signal(sig, handler)


def _percentiles(lat_s):
    if not lat_s:
        return {k: None for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "min_ms", "mean_ms")}
    x = np.asarray(lat_s, dtype=np.float64) * 1e3
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return {"p50_ms": float(p50), "p90_ms": float(p90), "p99_ms": float(p99), "max_ms": float(x.max()),
            "min_ms": float(x.min()), "mean_ms": float(x.mean())}


def load_level(spec, build_dir, level, feeds, warmup_s, duration_s):
    """Run one level; returns its figures (see the module's load section). Stopped part-way (the
    host's SIGTERM: :class:`Interrupted`, or a failure), it ends its workers before it raises."""
    import threading
    level = dict(level)
    k, batch = int(level["concurrency"]), int(level["batch"])
    level["spinning"] = k == 1
    bfeeds = _load_feeds(feeds, batch)
    temp0 = temperature_c()
    stop, procs, threads, watch = threading.Event(), [], [], None
    try:
        if level["sessions"] == "shared":
            call = _load_call(spec, build_dir, level["threads"], level["spinning"], bfeeds)
            call()
            level["providers"] = getattr(call, "providers", None)
            watch = _RssWatch([os.getpid()])
            t0 = time.perf_counter() + 0.01
            threads, out, arrivals = _load_threads(call, level, t0, warmup_s, duration_s, stop)
        else:
            pipes, t0 = _load_processes(spec, build_dir, level, bfeeds, warmup_s, duration_s, procs)
            watch = _RssWatch([os.getpid()] + [p.pid for p in procs])
            arrivals = None
        time.sleep(max(0.0, t0 + warmup_s - time.perf_counter()))
        cpu0 = _cpu_jiffies()
        time.sleep(max(0.0, t0 + warmup_s + duration_s - time.perf_counter()))
        cpu1 = _cpu_jiffies()
        if level["sessions"] == "shared":
            for t in threads:
                t.join()
        else:
            out = []
            for p, c in zip(procs, pipes):
                got = c.recv() if c.poll(duration_s + 120) else None
                p.join(10)
                if not isinstance(got, dict) or "fatal" in got:
                    why = got.get("fatal") if isinstance(got, dict) else "exit code %s" % p.exitcode
                    got = {"lat": [], "errors": 1, "error": "worker died: %s" % why, "last": None}
                out.append(got)
                level.setdefault("providers", got.get("providers"))
    except BaseException:
        _end_workers(procs, threads, stop)
        raise
    finally:
        rss = watch.done() if watch is not None else None
    temp1 = temperature_c()
    lat = [x for o in out for x in o["lat"]]
    lasts = [o["last"] for o in out if o["last"] is not None]
    t_measure = t0 + warmup_s
    elapsed = max(duration_s, (max(lasts) - t_measure) if lasts else duration_s)
    errors = sum(o["errors"] for o in out)
    offered = None
    if level.get("rate"):
        offered = arrivals.finish() if arrivals is not None else sum(o.get("offered") or 0 for o in out)
    stride = max(1, -(-len(lat) // LOAD_MAX_SAMPLES))
    busy = None
    if cpu0 and cpu1 and cpu1[1] > cpu0[1]:
        busy = round(100.0 * (cpu1[0] - cpu0[0]) / (cpu1[1] - cpu0[1]), 1)
    level.update(_percentiles(lat))
    level.update({
        "completed": len(lat), "errors": errors,
        "error": next((o["error"] for o in out if o["error"]), None),
        "unserved": (max(0, offered - len(lat) - errors) if offered is not None else None),
        "offered": offered, "duration_s": duration_s, "warmup_s": warmup_s, "elapsed_s": round(elapsed, 6),
        "inferences_per_s": len(lat) / elapsed, "samples_per_s": len(lat) * batch / elapsed,
        "cpu_util_pct": busy, "peak_rss_mb": rss, "temp_c_before": temp0, "temp_c_after": temp1,
        "samples_ms": [round(x * 1e3, 6) for x in lat[::stride]], "samples_stride": stride})
    return level


def load(build_dir, spec):
    """The ``load`` command (see the section comment above for the events). A spec over the
    limits is refused first (``refuse_spec``). SIGTERM/SIGINT (the host stopping it) end the
    level in progress and its workers; the levels measured before are already out, then an
    ``error`` event of kind ``interrupted``, exit 130."""
    refused = refuse_spec("load", spec, build_dir)
    if refused is not None:
        return refused
    return interruptible(load_events, build_dir, spec, "stopped by %s: the levels measured before are kept")


def load_events(build_dir, spec):
    """The events of a load run, in order."""
    emit("start", pid=os.getpid(), runner_version=RUNNER_VERSION, time=time.time(), mode="load")
    note_in_lease(spec.get("lease"))
    if spec.get("deadline_s") and hasattr(__import__("signal"), "alarm"):
        import signal
        signal.alarm(max(1, int(spec["deadline_s"] + 0.999)))
    bad = check_files(build_dir, spec.get("files", {}))
    if bad:
        emit("error", kind="digest", files=bad, message="sha256 mismatch for %s" % ", ".join(bad))
        return EXIT_DIGEST
    emit("files", checked=sorted(spec.get("files", {})))
    needed = "numpy" if np is None else needed_runtime(dict(spec, runner="python"))
    try:
        if np is None:
            raise RuntimeMissing("numpy is not importable by %s" % sys.executable)
        import_runtime(needed)
    except RuntimeMissing as exc:
        emit("error", kind="runtime-missing", runtime=needed, message=str(exc))
        return EXIT_RUNTIME_MISSING
    emit("fingerprint", when="before", fingerprint=fingerprint())
    feeds = load_reference(build_dir, spec)[0]
    if needed == "onnxruntime":
        import onnxruntime as ort
        emit("runtime", name="onnxruntime", version=ort.__version__)
    else:
        emit("runtime", name="paddlelite", version=dist_version("paddlelite"))
    warmup_s, duration_s = float(spec.get("warmup_s", 0.2)), float(spec.get("duration_s", 2.0))
    for i, level in enumerate(spec["levels"]):
        if level["sessions"] == "shared" and needed != "onnxruntime" and int(level["concurrency"]) > 1:
            emit("level", index=i, skipped="%s predictors are not thread-safe: own sessions only" % needed,
                 **level)
            continue
        emit("level", index=i, **load_level(spec, build_dir, level, feeds, warmup_s, duration_s))
    emit("fingerprint", when="after", fingerprint=fingerprint())
    emit("done", time=time.time())
    return EXIT_OK


def load_main(argv):
    return spec_command("load", argv, load)
