"""The bounds on every value that reaches a device (runs, threads, batch, load rates and
durations, end-to-end images) and the check that refuses a spec past them before anything runs.
Pure: the host checks the same numbers before it sends a spec."""
from __future__ import annotations

import os

from .device_facts import fingerprint
from .protocol import EXIT_USAGE, emit


# bench --end-to-end (end_to_end.py): the build's raw images, their size, the timed runs
E2E_MAX_IMAGES = 16
E2E_MAX_IMAGE_BYTES = 16 << 20
E2E_MAX_PIXELS = 40000000
E2E_MAX_RUNS = 10000


# ---------------------------------------------------------------- spec limits
# What the runner refuses before it touches anything, whoever wrote the spec (a crafted build, an
# older host): absurd counts, rates and durations, non-finite numbers, more load workers than the
# device can hold. The host checks the same limits (edgeforge.device.load and edgeforge.options
# import these) before anything is sent; this is the second line.

LOAD_MAX_WORKERS = 256          # workers of one load level: the hard ceiling, --force included
LOAD_WORKERS_PER_CORE = 4       # the default cap: 4 workers per core, and never under 8
LOAD_MIN_CAP = 8
LOAD_WORKER_MB = 200            # memory of one 'own' worker process (runtime + session), plus 2x the artifact
LOAD_MEM_SHARE = 0.8            # of the device's memory the 'own' workers may take together
LOAD_MAX_RATE = 10000.0         # open-loop arrivals per second
LOAD_MAX_ARRIVALS = 1000000     # arrivals per level: rate x (warm-up + duration)
LOAD_MAX_DURATION_S = 3600.0    # measured seconds per level
LOAD_MAX_WARMUP_S = 600.0
LOAD_MAX_LEVELS = 1000
LOAD_MAX_TOTAL_S = 86400.0      # all the levels of one run, warm-ups included
MAX_BATCH = 4096
MAX_THREADS = 256               # runtime threads per session
MAX_RUNS = 1000000              # timed runs (and warm-ups) of one bench
MAX_DEADLINE_S = 2 * 86400.0


def load_worker_cap(sessions, cores, mem_mb, artifact_mb=0.0, force=False):
    """(the most workers a load level may run on a device with ``cores`` and ``mem_mb`` of memory
    (None: unknown), why). Default: 4 per core, at least 8; ``force``: up to LOAD_MAX_WORKERS.
    'own' sessions are a process each (~200 MB plus twice the artifact): never more than
    LOAD_MEM_SHARE of the memory holds, ``force`` or not."""
    if force:
        cap, why = LOAD_MAX_WORKERS, "the hard ceiling"
    else:
        cap = min(LOAD_MAX_WORKERS, max(LOAD_MIN_CAP, LOAD_WORKERS_PER_CORE * int(cores or 1)))
        why = "the default cap (%d per core on %s cores, at least %d)" % (LOAD_WORKERS_PER_CORE, cores or "?",
                                                                          LOAD_MIN_CAP)
    if sessions == "own" and mem_mb:
        per = LOAD_WORKER_MB + 2.0 * max(0.0, float(artifact_mb or 0.0))
        mem = max(1, int(LOAD_MEM_SHARE * float(mem_mb) // per))
        if mem < cap:
            cap, why = mem, "what %.0f MB of memory holds at %.0f MB per worker process" % (mem_mb, per)
    return cap, why


def _finite(v, low, high, low_ok=False):
    """Whether ``v`` is a real number (not a bool) in (low, high], or [low, high] with ``low_ok``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        return False
    return (v >= low if low_ok else v > low) and v <= high


def _count(v, low, high):
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _check_common(spec):
    rt = spec.get("runtime") or {}
    if not isinstance(rt, dict):
        return "runtime must be an object"
    if rt.get("threads") is not None and not _count(rt["threads"], 1, MAX_THREADS):
        return "runtime.threads %r: a count from 1 to %d" % (rt["threads"], MAX_THREADS)
    if spec.get("deadline_s") is not None and not _finite(spec["deadline_s"], 0, MAX_DEADLINE_S):
        return "deadline_s %r: seconds > 0, at most %g" % (spec["deadline_s"], MAX_DEADLINE_S)
    return None


def _check_bench(spec):
    if spec.get("runs") is not None and not _count(spec["runs"], 1, MAX_RUNS):
        return "runs %r: a count from 1 to %d" % (spec["runs"], MAX_RUNS)
    w = spec.get("warmups", "auto")
    if w is not None and w != "auto" and not _count(w, 0, MAX_RUNS):
        return "warmups %r: 'auto' or a count from 0 to %d" % (w, MAX_RUNS)
    base = spec.get("baseline")
    if base is not None and (not isinstance(base, dict) or base.get("path") not in (spec.get("files") or {})):
        return "baseline must be an object whose path is one of files (its sha256 checked)"
    e2e = spec.get("end_to_end")
    if e2e is not None:
        if not isinstance(e2e, dict) or not isinstance(e2e.get("images"), list):
            return "end_to_end must be an object with a list of images"
        if not 1 <= len(e2e["images"]) <= E2E_MAX_IMAGES:
            return "end_to_end.images: 1 to %d images" % E2E_MAX_IMAGES
        if e2e.get("runs") is not None and not _count(e2e["runs"], 1, E2E_MAX_RUNS):
            return "end_to_end.runs %r: a count from 1 to %d" % (e2e["runs"], E2E_MAX_RUNS)
    return None


def _check_level(lv, warmup_s, duration_s, cap):
    if not isinstance(lv, dict):
        return "not an object"
    if lv.get("mode", "closed") not in ("closed", "open") or lv.get("sessions") not in ("shared", "own"):
        return "mode must be closed or open, sessions shared or own"
    k = lv.get("concurrency")
    if not _count(k, 1, LOAD_MAX_WORKERS):
        return "concurrency %r: a count from 1 to %d" % (k, LOAD_MAX_WORKERS)
    most, why = cap(lv["sessions"])
    if k > most:
        return "concurrency %d is over %d, %s" % (k, most, why)
    if not _count(lv.get("batch"), 1, MAX_BATCH):
        return "batch %r: a count from 1 to %d" % (lv.get("batch"), MAX_BATCH)
    if lv.get("threads") is not None and not _count(lv["threads"], 1, MAX_THREADS):
        return "threads %r: a count from 1 to %d" % (lv["threads"], MAX_THREADS)
    if lv.get("mode") == "open" or lv.get("rate") is not None:
        rate = lv.get("rate")
        if not _finite(rate, 0, LOAD_MAX_RATE):
            return "rate %r: requests/s > 0, at most %g" % (rate, LOAD_MAX_RATE)
        if rate * (warmup_s + duration_s) > LOAD_MAX_ARRIVALS:
            return "rate %g for %gs is over %d arrivals" % (rate, warmup_s + duration_s, LOAD_MAX_ARRIVALS)
    return None


def _check_load(spec, build_dir):
    d, w = spec.get("duration_s", 2.0), spec.get("warmup_s", 0.2)
    if not _finite(d, 0, LOAD_MAX_DURATION_S):
        return "duration_s %r: seconds > 0, at most %g" % (d, LOAD_MAX_DURATION_S)
    if not _finite(w, 0, LOAD_MAX_WARMUP_S, low_ok=True):
        return "warmup_s %r: seconds >= 0, at most %g" % (w, LOAD_MAX_WARMUP_S)
    levels = spec.get("levels")
    if not isinstance(levels, list) or not 1 <= len(levels) <= LOAD_MAX_LEVELS:
        return "levels: a list of 1 to %d levels" % LOAD_MAX_LEVELS
    if len(levels) * (d + w) > LOAD_MAX_TOTAL_S:
        return "%d levels of %gs are over %gs in all" % (len(levels), d + w, LOAD_MAX_TOTAL_S)
    fp = fingerprint()
    try:
        art_mb = os.path.getsize(os.path.join(build_dir, spec["artifact"]["path"])) / 1e6
    except (KeyError, TypeError, OSError):
        art_mb = 0.0

    def cap(sessions):         # the memory the device has, not what is free now (the host checked that)
        return load_worker_cap(sessions, fp.get("cores"), fp.get("mem_total_mb"), art_mb,
                               force=spec.get("force") is True)

    for i, lv in enumerate(levels):
        bad = _check_level(lv, w, d, cap)
        if bad:
            return "levels[%d]: %s" % (i, bad)
    return None


def refuse_spec(command, spec, build_dir="."):
    """Check a ``bench`` or ``load`` spec before anything runs; on an absurd value, one ``error``
    event of kind ``usage`` and EXIT_USAGE, else None."""
    if not isinstance(spec, dict):
        bad = "the spec must be a JSON object"
    else:
        bad = _check_common(spec) or (_check_load(spec, build_dir) if command == "load" else _check_bench(spec))
    if bad is None:
        return None
    emit("error", kind="usage", message="%s spec refused: %s" % (command, bad))
    return EXIT_USAGE
