"""Predictors: a ``run(feeds) -> outputs`` callable on onnxruntime or Paddle Lite, made from a
manifest, and the ways to run one over an evaluation set. Pure (the runtime imported lazily):
the host's verify and quantize run the same code as the device."""
from __future__ import annotations

import os
import time

try:
    import numpy as np
except ImportError:  # probe still reports the device; bench says numpy is missing
    np = None

from .device_facts import dist_version


# ---------------------------------------------------------------- predictors

def provider_entries(providers, options=None, cache_dir=None, available=None):
    """onnxruntime's ``providers`` argument: the requested providers this build has, in order,
    each with its options. TensorRT keeps its engine (and timing) cache in ``cache_dir``."""
    wanted = [p for p in (providers or ["CPUExecutionProvider"]) if available is None or p in available]
    out = []
    for p in wanted or ["CPUExecutionProvider"]:
        opts = dict((options or {}).get(p) or {})
        if p == "TensorrtExecutionProvider" and cache_dir:
            opts.setdefault("trt_engine_cache_enable", True)
            opts.setdefault("trt_engine_cache_path", cache_dir)
            opts.setdefault("trt_timing_cache_enable", True)
            opts.setdefault("trt_timing_cache_path", cache_dir)
        out.append((p, opts) if opts else p)
    return out


def onnx_predictor(model_path, threads=None, providers=None, provider_options=None, cache_dir=None,
                   profile_dir=None, spinning=True):
    """A run(feeds) callable on an onnxruntime session. ``profile_dir``: a profiling session with
    graph optimizations off, for ``onnx_placement`` (its nodes are the artifact's own).
    ``spinning=False``: intra-op threads do not spin after a run (``load``: several at once)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
    if not spinning:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if profile_dir:
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(profile_dir, "edgeforge-placement")
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    entries = provider_entries(providers, provider_options, cache_dir, ort.get_available_providers())
    if cache_dir and "TensorrtExecutionProvider" in [e[0] if isinstance(e, tuple) else e for e in entries]:
        if not os.path.isdir(cache_dir):
            os.makedirs(cache_dir)
    sess = ort.InferenceSession(str(model_path), sess_options=opts, providers=entries)
    names = [i.name for i in sess.get_inputs()]

    def run(feeds):
        return [np.asarray(o) for o in sess.run(None, {n: feeds[n] for n in names})]

    run.runtime = {"name": "onnxruntime", "version": ort.__version__, "providers": sess.get_providers()}
    run.input_names = names
    run.session = sess
    return run


def lite_predictor(model_path, threads=None, power_mode=None, input_names=None):
    from paddlelite import lite

    cfg = lite.MobileConfig()
    cfg.set_model_from_file(str(model_path))
    for setter, value in (("set_threads", threads), ("set_power_mode", power_mode)):
        if value is not None and hasattr(cfg, setter):
            if setter == "set_power_mode":
                value = getattr(lite.PowerMode, str(value), value)
            getattr(cfg, setter)(value)
    pred = lite.create_paddle_predictor(cfg)
    names = list(input_names or pred.get_input_names())

    def run(feeds):
        order = names or list(feeds)
        for i, name in enumerate(order):
            pred.get_input(i).from_numpy(np.ascontiguousarray(feeds[name]))
        pred.run()
        # get_output(i) past the last output aborts the process: ask for the count first.
        return [np.array(pred.get_output(i).numpy(), copy=True)   # a view of the predictor's buffer
                for i in range(len(pred.get_output_names()))]

    try:
        import paddlelite
        version = pred.get_version() or getattr(paddlelite, "__version__", None) or dist_version("paddlelite")
    except Exception:  # noqa: BLE001
        version = "unknown"
    run.runtime = {"name": "paddlelite", "version": version}
    run.input_names = names
    return run


ENGINE_CACHE = "trt_cache"      # beside the artifact, in <workdir>/<artifact sha256>/


def applied_settings(rt, backend):
    """(threads, power mode) as this device's runtime applies them: never more threads than the
    device has cores, and a power mode only for Paddle Lite (onnxruntime has none)."""
    threads = rt.get("threads")
    cores = os.cpu_count()
    if threads and cores and int(threads) > cores:
        threads = cores
    return threads, (rt.get("power_mode") if backend == "lite" else None)


def make_predictor(manifest, build_dir, threads=None, power_mode=None):
    art = os.path.join(build_dir, manifest["artifact"]["path"])
    names = [i["name"] for i in manifest["inputs"]]
    if manifest["backend"] == "onnx":
        rt = manifest.get("runtime", {})
        return onnx_predictor(art, threads, rt.get("execution_providers"), rt.get("provider_options"),
                              os.path.join(build_dir, ENGINE_CACHE))
    if manifest["backend"] == "lite":
        return lite_predictor(art, threads, power_mode, names)
    raise ValueError("unknown backend %r" % manifest["backend"])


def load_twice(make, one):
    """Create the predictor and run it once, twice over: the first load builds what the runtime
    builds (TensorRT's engine, then cached), the second is the warm load. Returns the second
    predictor and {"first_ms", "warm_ms"} (each: creation plus the first run at ``one``)."""
    times = []
    run = None
    for _ in range(2):
        run = None                      # the first session is gone before the second loads
        t0 = time.perf_counter()
        run = make()
        run(one)
        times.append(round((time.perf_counter() - t0) * 1e3, 3))
    return run, {"first_ms": times[0], "warm_ms": times[1], "what": "predictor creation + first run, batch 1"}


def predict_per_batch_size(make, feeds, batch=64):
    """Outputs over all samples in chunks of ``batch``, with a fresh predictor for each batch size
    (the last chunk may be smaller). Paddle Lite's ARM INT8 fully-connected kernel prepares its
    weights on the first run only, so a predictor whose batch size changes gives wrong outputs:
    never reuse one across batch sizes. Returns (outputs, {batch size: predictors created})."""
    names = list(feeds)
    n = len(feeds[names[0]])
    runs, created, chunks = {}, {}, []
    for i in range(0, n, batch):
        chunk = {k: feeds[k][i:i + batch] for k in names}
        size = len(chunk[names[0]])
        if size not in runs:
            runs.clear()                # one predictor alive at a time
            runs[size] = make()
            created[size] = created.get(size, 0) + 1
        chunks.append(runs[size](chunk))
    outs = [np.concatenate([c[j] for c in chunks]) for j in range(len(chunks[0]))]
    return outs, dict((str(k), v) for k, v in created.items())


def predict_all(run, feeds, batch=None):
    """Run over all samples; batch=None runs sample by sample stacked in chunks of 64."""
    names = list(feeds)
    n = len(feeds[names[0]])
    batch = batch or 64
    chunks = []
    for i in range(0, n, batch):
        chunks.append(run({k: feeds[k][i:i + batch] for k in names}))
    return [np.concatenate([c[j] for c in chunks]) for j in range(len(chunks[0]))]
