"""The runner's protocol with the host: the version, the ``@@edgeforge {json}`` events, the exit
codes, the faults by cause (the build's, a missing runtime, a stop signal), the sha256 check of
the shipped files, the note in the host's lease and ``NAME DIR --spec JSON`` parsing.
Device-side (the host parses events in edgeforge.device.link.events)."""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time


RUNNER_VERSION = 6              # 6: int8_vs_fp32 (an INT8 build and its fp32 sibling, interleaved)
EVENT_PREFIX = "@@edgeforge "
EXIT_OK, EXIT_USAGE, EXIT_DIGEST, EXIT_RUNTIME_MISSING, EXIT_RUNTIME_FAILED = 0, 2, 3, 4, 5
EXIT_BUILD = 7


class BuildFault(ValueError):
    """The build's own files do not fit its manifest (an input name the reference data or the
    model lacks, a reference file that does not load): the build is at fault, not the device."""


# ---------------------------------------------------------------- files

def sha256_file(path, chunk=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def check_files(root, expected):
    """Return the relative paths under ``root`` whose sha256 is not the expected one (or missing).
    A path that is not plainly relative (absolute, ``..``) is a BuildFault: it would leave ``root``."""
    bad = []
    for rel, digest in sorted(expected.items()):
        parts = str(rel).replace("\\", "/").split("/")
        if not rel or os.path.isabs(rel) or any(p in ("", ".", "..") for p in parts):
            raise BuildFault("file name %r is not a relative path inside the build" % (rel,))
        path = os.path.join(root, rel)
        try:
            ok = sha256_file(path) == digest
        except OSError:
            ok = False
        if not ok:
            bad.append(rel)
    return bad


# ---------------------------------------------------------------- interrupts (bench)
# Ctrl-C on the host sends SIGTERM to this process: the bench stops after the run in progress,
# reports the samples measured so far (latency event, ``interrupted``) and exits 130.
EXIT_INTERRUPTED = 130


class Interrupted(BaseException):
    """SIGTERM, SIGINT or SIGHUP (the SSH session gone) while measuring: stop and report."""


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def interruptible(events, build_dir, spec, message):
    """``events(build_dir, spec)`` with SIGTERM, SIGINT and SIGHUP turned into an ``error`` event
    of kind ``interrupted`` (``message`` % the signal's name) and exit 130; handlers restored after.
    A SIGHUP that was ignored when the runner started (``nohup``) stays ignored."""
    import signal

    sigs = [getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, n)]
    before = {}
    for sig in sigs:
        if sig == getattr(signal, "SIGHUP", None) and signal.getsignal(sig) == signal.SIG_IGN:
            continue
        before[sig] = signal.signal(sig, _raise_interrupted)
    try:
        return events(build_dir, spec)
    except Interrupted as exc:
        sig = exc.args[0] if exc.args else None
        name = signal.Signals(sig).name if sig in set(signal.Signals) else "a signal"
        emit("error", kind="interrupted", message=message % name)
        return EXIT_INTERRUPTED
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------- bench

def emit(event, **fields):
    fields["event"] = event
    sys.stdout.write(EVENT_PREFIX + json.dumps(fields, allow_nan=True) + "\n")
    sys.stdout.flush()


class RuntimeMissing(Exception):
    pass


def needed_runtime(spec):
    if spec.get("runner") == "benchmark_bin":
        return "benchmark_bin"
    return {"onnx": "onnxruntime", "lite": "paddlelite"}.get(spec["backend"], spec["backend"])


def import_runtime(name):
    try:
        if name == "onnxruntime":
            import onnxruntime  # noqa: F401
        elif name == "paddlelite":
            from paddlelite import lite  # noqa: F401
    except ImportError as exc:
        raise RuntimeMissing("%s is not importable by %s (%s)" % (name, sys.executable, exc)) from exc


def note_in_lease(lease):
    """Write ``runner.json`` (pid, token) into the lease directory, if it is there."""
    if not lease or not lease.get("dir") or not os.path.isdir(lease["dir"]):
        return
    path = os.path.join(lease["dir"], "runner.json")
    try:
        with open(path + ".tmp", "w") as fh:
            json.dump({"pid": os.getpid(), "token": lease.get("token"), "time": time.time()}, fh)
        os.rename(path + ".tmp", path)
    except OSError:
        pass


def spec_command(name, argv, fn, default=None, help=None):
    """``NAME DIR --spec JSON``: parse, run ``fn(DIR, spec)``; a failure is one error event.
    ``default``: the spec when --spec is not given (else it is required)."""
    import argparse
    ap = argparse.ArgumentParser(prog="edgeforge_runner " + name)
    ap.add_argument("dir")
    ap.add_argument("--spec", required=default is None, default=default, help=help or name + " spec as JSON")
    args = ap.parse_args(argv)
    try:
        spec = json.loads(args.spec)
    except ValueError as exc:
        emit("error", kind="usage", message="--spec is not JSON: %s" % exc)
        return EXIT_USAGE
    return run_classified(fn, args.dir, spec)


def run_classified(fn, *args):
    """``fn(*args)``; an exception is one ``error`` event: kind ``build`` (exit 7) for a
    BuildFault (the build's files), ``runtime`` (exit 5) for anything else."""
    try:
        return fn(*args)
    except BuildFault as exc:
        emit("error", kind="build", message=" ".join(str(exc).split())[:500])
        return EXIT_BUILD
    except Exception as exc:  # noqa: BLE001 - reported to the host as one event
        import traceback
        traceback.print_exc()
        emit("error", kind="runtime", message="%s: %s" % (type(exc).__name__, str(exc).splitlines()[0]
                                                          if str(exc) else ""))
        return EXIT_RUNTIME_FAILED


# ---------------------------------------------------------------- smoke (deploy)

EXIT_DRIFT = 6
