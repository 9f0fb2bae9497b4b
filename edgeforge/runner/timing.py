"""Timed runs: warm-ups until the latency is stable, then the samples; and the same through
Paddle Lite's ``benchmark_bin`` (its command line and its output)."""
from __future__ import annotations

import os
import time

try:
    import numpy as np
except ImportError:  # probe still reports the device; bench says numpy is missing
    np = None

from .protocol import Interrupted


# ---------------------------------------------------------------- timing

def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def warmup_until_stable(run_once, window=5, rel_tol=0.05, min_runs=10, max_runs=1000, max_seconds=30.0):
    """Run ``run_once`` (returns milliseconds) until timings settle: the median of the last
    ``window`` runs is within ``rel_tol`` of the median of the ``window`` before. Stops anyway at
    ``max_runs`` or after ``max_seconds``. Returns (warmup timings, whether they settled)."""
    times = []
    start = time.perf_counter()
    while True:
        times.append(run_once())
        n = len(times)
        if n >= max(min_runs, 2 * window):
            a = median(times[-2 * window:-window])
            b = median(times[-window:])
            if abs(b - a) <= rel_tol * max(a, b, 1e-9):
                return times, True
        if n >= max_runs or time.perf_counter() - start > max_seconds:
            return times, False


def timed(run, feeds):
    def once():
        t0 = time.perf_counter()
        run(feeds)
        return (time.perf_counter() - t0) * 1e3
    return once


def measure(once, warmups, runs):
    """Warm up (``"auto"`` or a count), then ``runs`` timed runs. Returns a dict of raw samples;
    stopped by the host (:class:`Interrupted`), the samples so far and ``interrupted: True``."""
    warm, stable, samples = [], None, []
    try:
        if warmups == "auto":
            warm, stable = warmup_until_stable(once)
        else:
            for _ in range(int(warmups)):
                warm.append(once())
        for _ in range(int(runs)):
            samples.append(once())
    except Interrupted:
        return {"warmups": len(warm), "warmup_stable": stable, "warmup_ms": warm,
                "samples_ms": samples, "interrupted": True}
    return {"warmups": len(warm), "warmup_stable": stable, "warmup_ms": warm, "samples_ms": samples}


INTERLEAVED_WARMUPS = 10        # per model, before the interleaved rounds, when warmups are "auto"


def interleaved_rounds(runs, one, warmups, rounds):
    """Time several predictors (``runs``: name -> run) in interleaved rounds at batch 1: round i
    times each once, the order rotating every round, so the device's drift falls on all alike
    (``edgeforge.quant.speed.interleaved`` does the same on the host). Returns name -> samples."""
    names = list(runs)
    onces = {n: timed(r, one) for n, r in runs.items()}
    for _ in range(int(warmups)):
        for n in names:
            onces[n]()
    out = {n: [] for n in names}
    for i in range(int(rounds)):
        k = i % len(names)
        for n in names[k:] + names[:k]:
            out[n].append(onces[n]())
    return out


# ---------------------------------------------------------------- benchmark_bin

_POWER_MODES = {"LITE_POWER_HIGH": 0, "LITE_POWER_LOW": 1, "LITE_POWER_FULL": 2, "LITE_POWER_NO_BIND": 3,
                "LITE_POWER_RAND_HIGH": 4, "LITE_POWER_RAND_LOW": 5}
BENCHMARK_BIN_WARMUPS = 10      # per process, when warmups are "auto"


def parse_benchmark_bin(text):
    """Figures from benchmark_bin's "Perf Info" block (ms) and its version line."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key in ("init", "first", "min", "max", "avg"):
            try:
                out[key + "_ms"] = float(value.split()[0])
            except (IndexError, ValueError):
                pass
        elif line.startswith("benchmark_bin version:"):
            out["version"] = line.split(":", 1)[1].strip()
    return out


def benchmark_bin_command(path, model, feeds, spec, warmups, repeats, workdir):
    """benchmark_bin's command line for ``feeds`` (written as text files, one per input), and a
    callable that removes those files."""
    import shutil
    import tempfile

    rt = spec.get("runtime", {})
    names = [i["name"] for i in spec["inputs"]]
    tmp = tempfile.mkdtemp(prefix="edgeforge-bb-", dir=workdir if os.access(workdir, os.W_OK) else None)
    paths = []
    for name in names:
        p = os.path.join(tmp, name + ".txt")
        np.savetxt(p, np.asarray(feeds[name], dtype=np.float32).reshape(-1), fmt="%.9g")
        paths.append(p)
    shapes = ":".join(",".join(str(d) for d in feeds[n].shape) for n in names)
    backend = "arm" if "arm" in (rt.get("valid_targets") or ["arm"]) else (rt.get("valid_targets") or ["x86"])[0]
    cmd = [path, "--optimized_model_file=" + model, "--input_shape=" + shapes,
           "--input_data_path=" + ":".join(paths), "--threads=%d" % int(rt.get("threads") or 1),
           "--power_mode=%d" % _POWER_MODES.get(rt.get("power_mode") or "LITE_POWER_NO_BIND", 3),
           "--backend=" + backend, "--warmup=%d" % int(warmups), "--repeats=%d" % int(repeats)]
    return cmd, lambda: shutil.rmtree(tmp, ignore_errors=True)


def benchmark_bin_measure(path, model, feeds, spec, warmups, runs, workdir):
    """Time with Paddle Lite's C++ benchmark_bin: one process per sample (``--repeats=1`` after
    ``--warmup`` runs), so every sample is one warm run; init time is never in a sample."""
    import subprocess

    warm = BENCHMARK_BIN_WARMUPS if warmups == "auto" else int(warmups)
    cmd, cleanup = benchmark_bin_command(path, model, feeds, spec, warm, 1, workdir)
    samples, version, first = [], None, None
    try:
        for _ in range(int(runs)):
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
            figures = parse_benchmark_bin(proc.stdout)
            if proc.returncode != 0 or "avg_ms" not in figures:
                tail = " | ".join(proc.stdout.strip().splitlines()[-3:])
                raise RuntimeError("benchmark_bin exited %d: %s" % (proc.returncode, tail))
            samples.append(figures["avg_ms"])
            version = figures.get("version", version)
            first = figures.get("first_ms", first)
    finally:
        cleanup()
    return {"warmups": warm, "warmup_stable": None, "warmup_ms": [], "samples_ms": samples,
            "runtime": {"name": "paddlelite-benchmark_bin", "version": version or "unknown", "path": path}}
