"""``bench DIR --spec JSON``: check the files, time the artifact, then (as asked) end to end, the
operator profile, and the drift over the evaluation set; one event per step."""
from __future__ import annotations

import os
import sys
import time

try:
    import numpy as np
except ImportError:  # probe still reports the device; bench says numpy is missing
    np = None

from .device_facts import benchmark_bin_info, fingerprint, peak_rss_mb
from .end_to_end import E2EMissing, end_to_end
from .limits import refuse_spec
from .metrics import DRIFT_BATCH, drift_metrics, jsonable, packed_outputs, reduce_outputs
from .placement import onnx_placement
from .postprocess import postprocess
from .predictors import (ENGINE_CACHE, applied_settings, lite_predictor, load_twice, make_predictor, onnx_predictor,
                         predict_all, predict_per_batch_size)
from .profile import op_profile
from .protocol import EXIT_DIGEST, EXIT_OK, EXIT_RUNTIME_MISSING, Interrupted, RUNNER_VERSION, RuntimeMissing, import_runtime, interruptible, needed_runtime, note_in_lease, check_files, emit
from .reference import load_reference
from .timing import INTERLEAVED_WARMUPS, benchmark_bin_measure, interleaved_rounds, measure, timed


def bench(build_dir, spec):
    """:func:`bench_events`, stopped cleanly by SIGTERM/SIGINT (an ``error`` event of kind
    ``interrupted`` after whatever was measured, exit 130). The handlers are restored after."""
    refused = refuse_spec("bench", spec, build_dir)
    if refused is not None:
        return refused
    return interruptible(bench_events, build_dir, spec, "stopped by %s")


def bench_events(build_dir, spec):
    """Measure the artifact in ``build_dir`` as ``spec`` says. Events, in order:

    start (pid, wall time), files (sha256 checked), fingerprint (before), runtime, latency (raw
    samples, peak RSS), fingerprint (after the timed runs), end_to_end (``spec["end_to_end"]``:
    per-stage samples and figures), drift (evaluation set vs float), outputs (the evaluation
    outputs, or with ``spec["postprocess"]`` their answers), done (wall time).

    ``spec["lease"]`` (optional, ``{"dir", "token"}``): the host's lease on this device; the runner
    writes its pid there so that nobody breaks the lease while it still runs.
    """
    emit("start", pid=os.getpid(), runner_version=RUNNER_VERSION, time=time.time())
    note_in_lease(spec.get("lease"))
    deadline = spec.get("deadline_s")
    if deadline and hasattr(__import__("signal"), "alarm"):
        import signal
        # SIGALRM's default action ends the process even inside native code.
        signal.alarm(max(1, int(deadline + 0.999)))
    bad = check_files(build_dir, spec.get("files", {}))
    if bad:
        emit("error", kind="digest", files=bad,
             message="sha256 mismatch for %s" % ", ".join(bad))
        return EXIT_DIGEST
    emit("files", checked=sorted(spec.get("files", {})))
    if np is None:
        emit("error", kind="runtime-missing", runtime="numpy",
             message="numpy is not importable by %s" % sys.executable)
        return EXIT_RUNTIME_MISSING
    needed = needed_runtime(spec)
    try:
        if needed == "benchmark_bin":
            info = benchmark_bin_info(spec.get("benchmark_bin") or "benchmark_bin")
            if not info["present"]:
                raise RuntimeMissing("benchmark_bin %r: %s" % (spec.get("benchmark_bin"), info.get("error")))
            spec["benchmark_bin"] = info["path"]
        else:
            import_runtime(needed)
    except RuntimeMissing as exc:
        emit("error", kind="runtime-missing", runtime=needed, message=str(exc))
        return EXIT_RUNTIME_MISSING
    before = fingerprint()
    emit("fingerprint", when="before", fingerprint=before)
    rt = spec.get("runtime", {})
    threads, power_mode = applied_settings(rt, spec.get("backend"))
    feeds, ref, labels = load_reference(build_dir, spec)
    one = {k: v[:1] for k, v in feeds.items()}     # latency: batch 1, the first evaluation sample
    warmups, runs = spec.get("warmups", "auto"), int(spec.get("runs", 100))
    model = os.path.join(build_dir, spec["artifact"]["path"])
    run = None
    if needed == "benchmark_bin":
        lat = benchmark_bin_measure(spec["benchmark_bin"], model, one, spec, warmups, runs, build_dir)
        runtime = lat.pop("runtime")
        rss = peak_rss_mb(children=True)
    else:
        def make():
            return make_predictor(spec, build_dir, threads, power_mode)

        cache = os.path.join(build_dir, ENGINE_CACHE) if needed == "onnxruntime" else None
        cached = len(os.listdir(cache)) if cache and os.path.isdir(cache) else 0
        run, load = load_twice(make, one)
        runtime = dict(run.runtime)
        if needed == "paddlelite":
            from paddlelite import lite
            runtime["threads_applied"] = hasattr(lite.MobileConfig, "set_threads")
        else:
            trt = "TensorrtExecutionProvider" in runtime["providers"]
            load.update(engine_cache=cache if trt else None, engine_cache_files_before=cached if trt else None)
            runtime["provider_options"] = rt.get("provider_options") or {}
            runtime["placement"] = onnx_placement(model, rt.get("execution_providers"), one,
                                                  rt.get("provider_options"), cache)
        runtime["load"] = load
        runtime["applied"] = {"threads": threads, "power_mode": power_mode}
        emit("runtime", **runtime)
        lat = measure(timed(run, one), warmups, runs)
        rss = peak_rss_mb()
    lat.update(peak_rss_mb=rss, runtime=runtime, batch=1)
    if lat.get("interrupted"):
        emit("latency", **lat)
        raise Interrupted()
    after = fingerprint()
    emit("latency", **lat)
    emit("fingerprint", when="after", fingerprint=after)
    if spec.get("baseline") and needed != "benchmark_bin":      # an INT8 build and its fp32 sibling
        emit("interleaving", rounds=int(spec.get("runs", 100)))
        emit("int8_vs_fp32", **sibling_rounds(spec, build_dir, one, (threads, power_mode)))
    if spec.get("end_to_end"):
        code = e2e_event(spec, build_dir, run, feeds, (threads, power_mode))
        if code:
            return code
    if spec.get("profile"):
        emit("profile", **op_profile(spec, model, one, threads))
    if spec.get("drift", True):
        drift(spec, build_dir, run, (feeds, ref, labels), (threads, power_mode))
    emit("done", time=time.time())
    return EXIT_OK


def sibling_rounds(spec, build_dir, one, settings):
    """The ``int8_vs_fp32`` event's fields: the artifact (INT8) and ``spec["baseline"]`` (the build's
    fp32 sibling) in fresh predictors, intra-op spinning off (sessions side by side spin against
    each other otherwise: TOOLCHAIN item 18), timed in ``spec["runs"]`` interleaved rounds."""
    threads, power_mode = settings
    rt = spec.get("runtime", {})

    def make(rel):
        path = os.path.join(build_dir, rel)
        if spec.get("backend") == "onnx":
            return onnx_predictor(path, threads, rt.get("execution_providers"), rt.get("provider_options"),
                                  os.path.join(build_dir, ENGINE_CACHE), spinning=False)
        return lite_predictor(path, threads, power_mode, [i["name"] for i in spec["inputs"]])

    warmups = spec.get("warmups", "auto")
    warmups = INTERLEAVED_WARMUPS if warmups == "auto" else min(int(warmups), INTERLEAVED_WARMUPS)
    rounds = int(spec.get("runs", 100))
    runs = {"fp32": make(spec["baseline"]["path"]), "int8": make(spec["artifact"]["path"])}
    got = interleaved_rounds(runs, one, warmups, rounds)
    return {"fp32_samples_ms": got["fp32"], "int8_samples_ms": got["int8"], "rounds": rounds,
            "warmups": warmups, "spinning": False if spec.get("backend") == "onnx" else None,
            "order": "rotating each round", "baseline": spec["baseline"]["path"]}


def e2e_event(spec, build_dir, run, feeds, settings):
    """The ``end_to_end`` event (bench --end-to-end), after the timed runs; with benchmark_bin
    timing the model, a Python predictor of its own. No Pillow: an ``error`` event, exit 4."""
    try:
        if run is None:
            import_runtime(needed_runtime(dict(spec, runner="python")))
            run = make_predictor(spec, build_dir, *settings)
        figures = end_to_end(spec, build_dir, run, feeds)
    except (E2EMissing, RuntimeMissing) as exc:
        emit("error", kind="runtime-missing", runtime="pillow" if isinstance(exc, E2EMissing) else spec["backend"],
             message="bench --end-to-end: %s" % exc)
        return EXIT_RUNTIME_MISSING
    emit("end_to_end", **figures)
    return None



def drift(spec, build_dir, run, reference, settings):
    """The evaluation set against the float reference. Paddle Lite: a fresh predictor per batch
    size (never the latency predictor, which ran at batch 1); onnxruntime: the timed session."""
    feeds, ref, labels = reference
    extra = {"batch": DRIFT_BATCH}
    if spec["backend"] == "lite":
        try:
            import_runtime("paddlelite")
        except RuntimeMissing as exc:
            emit("drift", skipped="no Python runtime for the evaluation set: %s" % exc)
            return
        outs, extra["predictors"] = predict_per_batch_size(
            lambda: make_predictor(spec, build_dir, *settings), feeds, DRIFT_BATCH)
    else:
        outs = predict_all(run, feeds, DRIFT_BATCH)
    m = {k: jsonable(v) for k, v in drift_metrics(outs, ref, labels).items()}
    emit("drift", samples=int(len(next(iter(feeds.values())))), **dict(m, **extra))
    if spec.get("return_outputs"):
        post = spec.get("postprocess")
        answers = post is not None and post.get("op", "none") != "none"
        reduce = None if answers else spec.get("reduce")
        packed, why = packed_outputs(postprocess(outs, post) if answers else reduce_outputs(outs, reduce))
        if packed is None:
            emit("outputs", npz=None, skipped=why)
        else:
            emit("outputs", npz=packed, answers=answers, samples=why, reduced=reduce)
