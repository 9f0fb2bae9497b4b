#!/usr/bin/env python3
"""edgeforge on-device runner: loads an artifact, measures it, compares it with float.

One file, no edgeforge import: needs Python 3, numpy and the model runtime (paddlelite,
onnxruntime, or Paddle Lite's C++ ``benchmark_bin``). edgeforge's host-side verify imports the
same functions, so host and device figures are computed by the same code.

Commands (the host runs them over SSH):

    edgeforge_runner.py probe [--benchmark-bin PATH]     JSON: python, numpy, runtimes, fingerprint
    edgeforge_runner.py bench DIR --spec JSON            JSON lines, one per event (see bench())
    edgeforge_runner.py load DIR --spec JSON             JSON lines: a load curve (see load())
    edgeforge_runner.py smoke DIR [--spec JSON]          JSON lines: drift of a release vs its budget
    edgeforge_runner.py BUILD_DIR                        drift of a build directory (legacy)

``bench`` prints one line per event, each ``@@edgeforge {json}``, flushed as it happens, so a
host that loses the connection still holds what was measured before. Exit codes: 0 ok, 2 usage,
3 a file does not match its sha256, 4 a runtime is missing, 5 the runtime failed, 6 (smoke) the
drift is over budget, 7 the build's own files do not fit its manifest (``error`` kind ``build``:
the host blames the build, not the device), 130 stopped by a signal.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time

try:
    import numpy as np
except ImportError:  # probe still reports the device; bench says numpy is missing
    np = None

RUNNER_VERSION = 5              # 5: end_to_end (bench --end-to-end), [postprocess] answers
EVENT_PREFIX = "@@edgeforge "
EXIT_OK, EXIT_USAGE, EXIT_DIGEST, EXIT_RUNTIME_MISSING, EXIT_RUNTIME_FAILED = 0, 2, 3, 4, 5
EXIT_BUILD = 7


class BuildFault(ValueError):
    """The build's own files do not fit its manifest (an input name the reference data or the
    model lacks, a reference file that does not load): the build is at fault, not the device."""


# ---------------------------------------------------------------- device facts
# fingerprint and probe live in device_facts.py, shipped beside this file (and sent alone by
# `edgeforge devices check`, which must stay far under Linux's 128 KiB limit for one argument)
try:
    from .device_facts import (dist_version, read_file, benchmark_bin_info, cpu_flags, fingerprint,
                               hwcap_flags, int8_cpu_flags, peak_rss_mb, probe, temperature_c)
except ImportError:  # run as a script on the device, or loaded by path: device_facts.py is beside it
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from device_facts import (dist_version, read_file, benchmark_bin_info, cpu_flags, fingerprint,  # noqa: F401
                              hwcap_flags, int8_cpu_flags, peak_rss_mb, probe, temperature_c)


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


# ---------------------------------------------------------------- ONNX graph, placement

def _varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf, start, end):
    """(field number, (start, end)) of each length-delimited field of one protobuf message."""
    i = start
    while i < end:
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            _, i = _varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, i = _varint(buf, i)
            yield key >> 3, (i, i + n)
            i += n
        else:
            raise ValueError("unsupported protobuf wire type %d" % wire)


def onnx_nodes(model_path):
    """[(name, op_type)] of the main graph's nodes, read from the protobuf (no onnx package on the
    device). ModelProto.graph is field 7, GraphProto.node field 1, NodeProto name/op_type 3/4."""
    with open(model_path, "rb") as fh:
        buf = fh.read()
    nodes = []
    for field, (a, b) in _fields(buf, 0, len(buf)):
        if field != 7:
            continue
        for f2, (c, d) in _fields(buf, a, b):
            if f2 != 1:
                continue
            node = {3: "", 4: ""}
            for f3, (e, g) in _fields(buf, c, d):
                if f3 in node:
                    node[f3] = buf[e:g].decode("utf-8", "replace")
            nodes.append((node[3], node[4]))
    return nodes


def onnx_placement(model_path, providers, feeds, provider_options=None, cache_dir=None, first=None):
    """How many of the artifact's nodes each execution provider ran: one profiled run (graph
    optimizations off, so the nodes are the artifact's own) at the given feeds. A node the
    profile lists runs on its provider; the nodes it does not list ran inside a compiled
    subgraph (TensorRT's fused kernels) and count for the provider of those kernels."""
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix="edgeforge-prof-")
    try:
        run = onnx_predictor(model_path, None, providers, provider_options, cache_dir, profile_dir=tmp)
        run(feeds)
        with open(run.session.end_profiling()) as fh:
            events = json.load(fh)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    nodes = [n for n, op in onnx_nodes(model_path) if op != "Constant"]
    counts = count_placement(events, nodes)
    return placement_summary(counts, len(nodes), first or (providers or ["CPUExecutionProvider"])[0],
                             run.runtime["providers"])


def count_placement(events, nodes):
    """{provider: nodes} from onnxruntime profile events over the artifact's ``nodes``."""
    names = set(nodes)
    counts, fused = {}, []
    for ev in events:
        name = ev.get("name", "")
        if ev.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        args = ev.get("args") or {}
        node, provider = name[:-len("_kernel_time")], args.get("provider", "unknown")
        if node in names:
            names.discard(node)
            counts[provider] = counts.get(provider, 0) + 1
        elif provider not in fused and not str(args.get("op_name", "")).startswith("Memcpy"):
            fused.append(provider)      # a compiled subgraph (copies between providers are not)
    if names:
        owner = fused[0] if len(fused) == 1 else ("unplaced" if not fused else "+".join(fused))
        counts[owner] = counts.get(owner, 0) + len(names)
    return counts


def placement_summary(counts, total, first, registered):
    on_first = counts.get(first, 0)
    accelerated = sum(v for k, v in counts.items() if k not in ("CPUExecutionProvider", "unplaced"))
    out = {"nodes": total, "by_provider": counts, "first_provider": first, "on_first_provider": on_first,
           "accelerated": accelerated, "registered": list(registered),
           "summary": "%d/%d nodes on %s" % (on_first, total, first),
           "method": "onnxruntime profiling: one run at batch 1, graph optimizations off"}
    if on_first < total:
        others = ", ".join("%d on %s" % (v, k) for k, v in sorted(counts.items()) if k != first)
        out["warning"] = "partial placement: %s%s" % (out["summary"], "; " + others if others else "")
    return out


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


# ---------------------------------------------------------------- drift

def drift_metrics(outputs, reference, labels=None):
    """Compare outputs with the float reference. Figures for output 0 at the top level,
    every output under "outputs". accuracy_drop is in percentage points."""
    per = []
    for out, ref in zip(outputs, reference):
        out = np.asarray(out, dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        if out.shape != ref.shape:
            # a detector's NMS rows vary in number: no tensor figures (its drift is drift.task)
            per.append(dict(dict.fromkeys(("max_abs_error", "mean_abs_error", "rel_max_abs_error", "cosine",
                                           "top1_agreement", "accuracy", "float_accuracy", "accuracy_drop")),
                            shape=list(out.shape), reference_shape=list(ref.shape)))
            continue
        diff = np.abs(out - ref)
        n = out.shape[0] if out.ndim else 1
        o2 = out.reshape(n, -1)
        r2 = ref.reshape(n, -1)
        denom = np.linalg.norm(o2, axis=1) * np.linalg.norm(r2, axis=1)
        num = np.sum(o2 * r2, axis=1)
        cos = np.where(denom > 0, num / np.where(denom > 0, denom, 1.0), np.where(np.all(o2 == r2, axis=1), 1.0, 0.0))
        ref_scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        m = {
            "max_abs_error": float(diff.max()) if diff.size else 0.0,
            "mean_abs_error": float(diff.mean()) if diff.size else 0.0,
            "rel_max_abs_error": float(diff.max() / ref_scale) if ref_scale > 0 and diff.size else 0.0,
            "cosine": float(np.mean(cos)),
            "top1_agreement": None, "accuracy": None, "float_accuracy": None, "accuracy_drop": None,
        }
        if out.ndim >= 2 and out.shape[-1] > 1:
            top_o = out.reshape(n, -1).argmax(1) if out.ndim == 2 else out.argmax(-1)
            top_r = ref.reshape(n, -1).argmax(1) if ref.ndim == 2 else ref.argmax(-1)
            m["top1_agreement"] = float(np.mean(top_o == top_r))
            if labels is not None and out.ndim == 2 and len(labels) == n:
                lab = np.asarray(labels)
                m["accuracy"] = float(np.mean(top_o == lab))
                m["float_accuracy"] = float(np.mean(top_r == lab))
                m["accuracy_drop"] = round((m["float_accuracy"] - m["accuracy"]) * 100.0, 10)
        per.append(m)
    top = dict((k, v) for k, v in (per[0] if per else {}).items() if k not in ("shape", "reference_shape"))
    top["outputs"] = per
    return top


OUTPUTS_MAX_BYTES = 8 << 20      # compressed evaluation outputs sent back for the host's task metric


def _npz_bytes(arrays):
    import io

    buf = io.BytesIO()
    np.savez_compressed(buf, **dict((k, np.asarray(v)) for k, v in arrays.items()))
    return buf.getvalue()


def reduce_outputs(outs, reduce):
    """``spec["reduce"]`` ({"op": "argmax", "output": k}, a segmenter): output k as its class map
    (uint8, or uint16 past 255 classes) instead of its scores, all the task metric reads."""
    if not reduce or reduce.get("op") != "argmax":
        return outs
    k = reduce.get("output", 0)
    outs = list(outs)
    if not isinstance(k, int) or not 0 <= k < len(outs):
        return outs
    x = np.asarray(outs[k])
    if x.ndim == 4:
        outs[k] = x.argmax(1).astype(np.uint8 if x.shape[1] <= 256 else np.uint16)
    return outs


def packed_outputs(outs, max_bytes=None):
    """The evaluation outputs as base64 of a compressed .npz (output_0, output_1, ...; or the
    keys of a dict: the answers of the declared post-processing), bounded: past ``max_bytes``
    the first samples that fit (halving; raw outputs only). Returns (base64, samples sent: None
    for answers) or (None, the reason)."""
    import base64

    cap = OUTPUTS_MAX_BYTES if max_bytes is None else max_bytes
    arrays = outs if isinstance(outs, dict) else dict(("output_%d" % i, o) for i, o in enumerate(outs))
    batched = not isinstance(outs, dict) and all(np.ndim(v) for v in arrays.values())
    n = min(len(v) for v in arrays.values()) if batched and arrays else None
    data = _npz_bytes(arrays)
    while len(data) > cap and batched and n > 1:
        n //= 2
        data = _npz_bytes(dict((k, np.asarray(v)[:n]) for k, v in arrays.items()))
    if len(data) > cap:
        return None, "the evaluation outputs are %d bytes compressed (more than %d)" % (len(data), cap)
    return base64.b64encode(data).decode("ascii"), n


# ---------------------------------------------------------------- pre-processing
# The declared [preprocess] pipeline (pipeline.json "steps"), implemented once with Pillow:
# the host's parity check in verify runs this code, and so does the device.

INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "area")


def _pil_filter(name):
    from PIL import Image

    f = getattr(Image, "Resampling", Image)
    return {"nearest": f.NEAREST, "bilinear": f.BILINEAR, "bicubic": f.BICUBIC, "area": f.BOX}[name]


def run_pipeline(image, steps):
    """A PIL image through ``steps`` (a list of {"op": ...}) -> the array one sample of the model
    input is (no batch axis). ops: decode {mode}, resize {size [h, w], interpolation}, resize_short {size,
    interpolation}, crop {size [h, w]} (centred), channel_order {order rgb|bgr}, scale {factor},
    normalize {mean, std} (per channel, in the channel order of the output), layout {NCHW|NHWC}."""
    img = image.convert("RGB")
    arr = None
    for st in steps:
        op = st["op"]
        if op == "decode":
            img = image.convert(st.get("mode", "RGB"))
        elif op == "resize":
            h, w = st["size"]
            img = img.resize((int(w), int(h)), _pil_filter(st.get("interpolation", "bilinear")))
        elif op == "resize_short":
            w, h = img.size
            k = float(st["size"]) / min(w, h)
            img = img.resize((max(1, int(round(w * k))), max(1, int(round(h * k)))),
                             _pil_filter(st.get("interpolation", "bilinear")))
        elif op == "crop":
            ch, cw = st["size"]
            w, h = img.size
            left, top = int(round((w - cw) / 2.0)), int(round((h - ch) / 2.0))
            img = img.crop((left, top, left + int(cw), top + int(ch)))
        else:
            if arr is None:
                arr = np.asarray(img, dtype=np.float32)          # [H, W, 3], RGB
            if op == "channel_order":
                arr = arr[..., ::-1] if st["order"] == "bgr" else arr
            elif op == "scale":
                arr = arr * np.float32(st["factor"])
            elif op == "normalize":
                arr = (arr - np.asarray(st["mean"], np.float32)) / np.asarray(st["std"], np.float32)
            elif op == "layout":
                arr = np.transpose(arr, (2, 0, 1)) if st["layout"] == "NCHW" else arr
            else:
                raise ValueError("unknown pre-processing step %r" % op)
    if arr is None:
        arr = np.asarray(img, dtype=np.float32)
    return np.ascontiguousarray(arr, dtype=np.float32)


# ---------------------------------------------------------------- post-processing
# The declared [postprocess] (pipeline.json "postprocess"), implemented once with numpy: verify
# runs it on the host over the artifact's and the float model's outputs, the device runs it over
# its own, and the answers (classes, text, boxes) are what drift.task compares.

POSTPROCESS_OPS = ("none", "topk", "ctc_greedy", "nms", "matrix_nms")
NMS_MAX_KEEP = 1000


def softmax(x, axis=-1):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def ctc_greedy(logits, blank=0, time_axis=1):
    """Greedy CTC decoding of ``[N, T, C]`` scores (``time_axis=0``: ``[T, N, C]``): the best
    class per step, repeats collapsed, then ``blank`` dropped. A list of lists of class ids."""
    x = np.asarray(logits)
    if time_axis == 0:
        x = np.swapaxes(x, 0, 1)
    best = x.argmax(-1) if x.ndim == 3 else x.astype(np.int64)
    out = []
    for row in best:
        seq, prev = [], None
        for c in row.tolist():
            if c != prev and c != blank:
                seq.append(int(c))
            prev = c
        out.append(seq)
    return out


def box_iou(box, others, normalized=True):
    """IoU of one box ``[4]`` with each of ``others [K, 4]`` (x1, y1, x2, y2); ``normalized``
    false: pixel boxes whose width is x2 - x1 + 1, as Paddle's NMS counts them."""
    b = np.asarray(others, dtype=np.float64).reshape(-1, 4)
    one = 0.0 if normalized else 1.0
    ix = np.clip(np.minimum(box[2], b[:, 2]) - np.maximum(box[0], b[:, 0]) + one, 0, None)
    iy = np.clip(np.minimum(box[3], b[:, 3]) - np.maximum(box[1], b[:, 1]) + one, 0, None)
    inter = ix * iy

    def area(x1, y1, x2, y2):
        return np.where((x2 < x1) | (y2 < y1), 0.0, (x2 - x1 + one) * (y2 - y1 + one))

    union = area(*box[:4]) + area(b[:, 0], b[:, 1], b[:, 2], b[:, 3]) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


NMS_MAX_CANDIDATES = 10000      # per class and image, whatever nms_top_k asks


def _nms_limits(nms_top_k, keep_top_k, cap):
    """(candidates per class, rows per image): -1 or more than the bounds means the bounds."""
    top = cap if int(nms_top_k) < 0 else min(int(nms_top_k), cap)
    return top, NMS_MAX_KEEP if int(keep_top_k) < 0 else min(int(keep_top_k), NMS_MAX_KEEP)


def _class_candidates(scores, above, background_label, top):
    """Per class of one image's ``scores [C, A]`` but ``background_label``: (class, its scores,
    the indices of its ``top`` best boxes where ``above`` holds, best first; ties by index)."""
    for c, sc in enumerate(scores):
        if c == int(background_label):
            continue
        idx = np.nonzero(above[c])[0]
        yield c, sc, idx[np.argsort(-sc[idx], kind="stable")][:top]


def nms(boxes, scores, score_threshold=0.05, iou_threshold=0.5, keep_top_k=100, nms_top_k=-1, normalized=True,
        background_label=-1, nms_eta=1.0):
    """Multi-class NMS of raw detector outputs, PicoDet style: ``boxes [N, A, 4]``, ``scores
    [N, C, A]`` -> rows ``[M, 6]`` (class, score, x1, y1, x2, y2) and counts ``[N]``, the layout
    of Paddle's ``multiclass_nms3``, whose attributes the rest are: per class (but
    ``background_label``) the ``nms_top_k`` best boxes above ``score_threshold``, each kept
    when its IoU with every box kept before is at most the threshold (times ``nms_eta`` after
    each kept box while above 0.5); per image the ``keep_top_k`` best."""
    boxes = np.asarray(boxes, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    top, keep_top_k = _nms_limits(nms_top_k, keep_top_k, NMS_MAX_CANDIDATES)
    rows, counts = [], []
    for b, s in zip(boxes, scores):
        found = []
        for c, sc, idx in _class_candidates(s, s >= score_threshold, background_label, top):
            kept, thr = [], float(iou_threshold)
            for i in idx:
                if not kept or box_iou(b[i], b[kept], normalized).max() <= thr:
                    kept.append(i)
                    found.append((c, sc[i], b[i][0], b[i][1], b[i][2], b[i][3]))
                    if nms_eta < 1.0 and thr > 0.5:
                        thr *= float(nms_eta)
        found.sort(key=lambda r: -r[1])
        found = found[:keep_top_k]
        rows += found
        counts.append(len(found))
    return np.array(rows, dtype=np.float32).reshape(-1, 6), np.array(counts, dtype=np.int32)


MATRIX_NMS_MAX_CANDIDATES = 2048   # per class and image: the IoU matrix is this squared (16 MB)


def matrix_nms(boxes, scores, score_threshold=0.05, post_threshold=0.05, nms_top_k=-1, keep_top_k=100,
               use_gaussian=False, gaussian_sigma=2.0, background_label=0, normalized=True):
    """Paddle's ``matrix_nms`` (SOLOv2's Matrix NMS, as its CPU kernel computes it, in float32):
    ``boxes [N, A, 4]``, ``scores [N, C, A]`` -> rows ``[M, 6]`` (class, decayed score, x1, y1,
    x2, y2) and counts ``[N]``. Per class (but ``background_label``): the ``nms_top_k`` best
    boxes above ``score_threshold``, each box's score decayed by the smallest over the boxes
    ranked above it of f(IoU with it, that box's own largest IoU with a box above it), f linear
    ``(1 - iou) / (1 - max_iou)`` or gaussian ``exp((max_iou^2 - iou^2) * gaussian_sigma)``; kept
    when the decayed score is above ``post_threshold``; per image the ``keep_top_k`` best. At
    most ``MATRIX_NMS_MAX_CANDIDATES`` boxes per class and image enter the matrix."""
    boxes = np.asarray(boxes, dtype=np.float32)
    scores = np.asarray(scores, dtype=np.float32)
    top, keep_top_k = _nms_limits(nms_top_k, keep_top_k, MATRIX_NMS_MAX_CANDIDATES)
    one = np.float32(0.0 if normalized else 1.0)
    rows, counts = [], []
    for b, s in zip(boxes, scores):
        found = []
        for c, sc, idx in _class_candidates(s, s > np.float32(score_threshold), background_label, top):
            if not len(idx):
                continue
            bx, sv = b[idx], sc[idx]
            ix = np.minimum(bx[:, None, 2], bx[None, :, 2]) - np.maximum(bx[:, None, 0], bx[None, :, 0]) + one
            iy = np.minimum(bx[:, None, 3], bx[None, :, 3]) - np.maximum(bx[:, None, 1], bx[None, :, 1]) + one
            apart = ((bx[None, :, 0] > bx[:, None, 2]) | (bx[None, :, 2] < bx[:, None, 0])
                     | (bx[None, :, 1] > bx[:, None, 3]) | (bx[None, :, 3] < bx[:, None, 1]))
            inter = ix * iy
            w, h = bx[:, 2] - bx[:, 0], bx[:, 3] - bx[:, 1]
            area = np.where((w < 0) | (h < 0), np.float32(0), (w + one) * (h + one))
            with np.errstate(divide="ignore", invalid="ignore"):
                iou = np.where(apart, np.float32(0), inter / (area[:, None] + area[None, :] - inter))
                lower = np.tril(iou, -1).astype(np.float32)             # [i, j]: box i against j above it
                iou_max = lower.max(axis=1)
                if use_gaussian:
                    decay = np.exp((iou_max[None, :] ** 2 - lower ** 2) * np.float32(gaussian_sigma))
                else:
                    decay = (np.float32(1) - lower) / (np.float32(1) - iou_max[None, :])
            above = np.tril(np.ones_like(lower, dtype=bool), -1)
            decay = np.where(above & ~np.isnan(decay), decay, np.float32(1))
            ds = decay.min(axis=1) * sv        # the first box: no box above it, decay 1
            for i in np.nonzero(ds > np.float32(post_threshold))[0]:
                found.append((c, ds[i], *bx[i][:4]))
        order = sorted(range(len(found)), key=lambda k: -found[k][1])[:keep_top_k]
        rows += [found[k] for k in order]
        counts.append(len(order))
    return np.array(rows, dtype=np.float32).reshape(-1, 6), np.array(counts, dtype=np.int32)


def _padded(seqs):
    width = max([len(s) for s in seqs] + [1])
    out = np.full((len(seqs), width), -1, dtype=np.int64)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = s
    return out


def postprocess(outputs, post):
    """The model's outputs (a list of arrays, batch first) through ``post`` (pipeline.json
    "postprocess": {"op": ...}) -> the answers, a dict of arrays. ops: none (the outputs as
    they are), topk {output, k, softmax} -> classes [N, k], scores [N, k]; ctc_greedy {output,
    blank, time_axis} -> text [N, L] (class ids, padded with -1); nms {boxes, scores,
    score_threshold, iou_threshold, keep_top_k} -> rows [M, 6], counts [N]; matrix_nms {boxes,
    scores, score_threshold, post_threshold, nms_top_k, keep_top_k, use_gaussian, gaussian_sigma,
    background_label, normalized} -> the same."""
    post = post or {}
    op = post.get("op", "none")
    if op == "none":
        return dict(("output_%d" % i, np.asarray(o)) for i, o in enumerate(outputs))
    if op == "topk":
        x = np.asarray(outputs[int(post.get("output", 0))], dtype=np.float64)
        x = x.reshape(len(x), -1)
        p = softmax(x, axis=1) if post.get("softmax", True) else x
        k = min(int(post.get("k", 5)), p.shape[1])
        top = np.argsort(-p, axis=1, kind="stable")[:, :k]
        return {"classes": top.astype(np.int64), "scores": np.take_along_axis(p, top, 1).astype(np.float32)}
    if op == "ctc_greedy":
        x = outputs[int(post.get("output", 0))]
        return {"text": _padded(ctc_greedy(x, int(post.get("blank", 0)), int(post.get("time_axis", 1))))}
    if op == "nms":
        rows, counts = nms(outputs[int(post.get("boxes", 0))], outputs[int(post.get("scores", 1))],
                           float(post.get("score_threshold", 0.05)), float(post.get("iou_threshold", 0.5)),
                           min(int(post.get("keep_top_k", 100)), NMS_MAX_KEEP), int(post.get("nms_top_k", -1)),
                           bool(post.get("normalized", True)), int(post.get("background_label", -1)),
                           float(post.get("nms_eta", 1.0)))
        return {"rows": rows, "counts": counts}
    if op == "matrix_nms":
        rows, counts = matrix_nms(outputs[int(post.get("boxes", 0))], outputs[int(post.get("scores", 1))],
                                  float(post.get("score_threshold", 0.05)), float(post.get("post_threshold", 0.05)),
                                  int(post.get("nms_top_k", -1)), int(post.get("keep_top_k", 100)),
                                  bool(post.get("use_gaussian", False)), float(post.get("gaussian_sigma", 2.0)),
                                  int(post.get("background_label", 0)), bool(post.get("normalized", True)))
        return {"rows": rows, "counts": counts}
    raise ValueError("unknown post-processing op %r (one of %s)" % (op, ", ".join(POSTPROCESS_OPS)))


def concat_answers(parts):
    """Answers of batches -> the answers of all samples (text padded to one width)."""
    if not parts:
        return {}
    out = {}
    for key in parts[0]:
        arrs = [p[key] for p in parts]
        if key == "text":
            width = max(a.shape[1] for a in arrs)
            arrs = [np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=-1) for a in arrs]
        out[key] = np.concatenate(arrs)
    return out


# ---------------------------------------------------------------- end to end (bench --end-to-end)
# Each of the build's raw images, per run: decode (OpenCV where the device has it, else Pillow),
# pre-process (run_pipeline: the code verify checked), inference at batch 1, post-process. Every
# stage is timed on its own; the share of the time outside the model is the "AI tax".

E2E_STAGES = ("decode", "preprocess", "infer", "postprocess")
E2E_MAX_IMAGES = 16
E2E_MAX_IMAGE_BYTES = 16 << 20
E2E_MAX_PIXELS = 40000000
E2E_MAX_RUNS = 10000


class E2EMissing(Exception):
    """The device's Python cannot decode or pre-process images (no Pillow)."""


def _decoder():
    try:
        from PIL import Image  # noqa: F401
    except ImportError as exc:
        raise E2EMissing("Pillow is not importable by %s (%s)" % (sys.executable, exc)) from exc
    try:
        import cv2
        return "opencv", getattr(cv2, "__version__", None)
    except ImportError:
        import PIL
        return "pillow", getattr(PIL, "__version__", None)


def decode_image(data, decoder):
    """JPEG/PNG bytes -> an RGB PIL image (what run_pipeline takes)."""
    from PIL import Image

    if decoder == "opencv":
        import cv2

        arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if arr is None:
            raise BuildFault("an image of the build does not decode")
        return Image.fromarray(arr[..., ::-1])
    import io

    img = Image.open(io.BytesIO(data))
    img.load()
    return img.convert("RGB")


def _image_bytes(build_dir, rels):
    """The images' bytes, each checked first: at most E2E_MAX_IMAGE_BYTES, and a header (read by
    Pillow, nothing decoded) of at most E2E_MAX_PIXELS pixels."""
    import io

    from PIL import Image

    out = []
    for rel in rels[:E2E_MAX_IMAGES]:
        path = os.path.join(build_dir, rel)
        if os.path.getsize(path) > E2E_MAX_IMAGE_BYTES:
            raise BuildFault("image %s is over %d bytes" % (rel, E2E_MAX_IMAGE_BYTES))
        with open(path, "rb") as fh:
            data = fh.read()
        try:
            w, h = Image.open(io.BytesIO(data)).size
        except Exception as exc:
            raise BuildFault("image %s does not open: %s" % (rel, exc)) from exc
        if w * h > E2E_MAX_PIXELS:
            raise BuildFault("image %s has %d pixels (at most %d)" % (rel, w * h, E2E_MAX_PIXELS))
        out.append(data)
    return out


def _stage_summary(xs):
    s = sorted(xs)
    if not s:
        return {"p50_ms": None, "p99_ms": None, "mean_ms": None}
    p99 = s[min(len(s) - 1, int(math.ceil(0.99 * len(s))) - 1)]
    return {"p50_ms": float(_median(s)), "p99_ms": float(p99), "mean_ms": float(sum(s)) / len(s)}


def e2e_summary(samples):
    """Per-stage and whole p50/p99/mean (ms) of per-image stage samples, and the AI tax: the
    share of the summed time spent outside inference."""
    total = [sum(parts) for parts in zip(*(samples[st] for st in E2E_STAGES))]
    whole = sum(total)
    infer = sum(samples["infer"])
    return {"stages": dict((st, _stage_summary(samples[st])) for st in E2E_STAGES),
            "total": _stage_summary(total),
            "ai_tax": (whole - infer) / whole if whole > 0 else None,
            "shares": dict((st, sum(samples[st]) / whole if whole > 0 else None) for st in E2E_STAGES)}


def end_to_end(spec, build_dir, run, feeds):
    """The ``end_to_end`` event's figures: ``spec["end_to_end"]`` = {images (paths in the build),
    steps (pre-processing), input (the input the image feeds), postprocess, runs}. One warm-up
    pass over the images, then ``runs`` images timed (cycling through them)."""
    e2e = spec["end_to_end"]
    decoder, version = _decoder()
    images = _image_bytes(build_dir, list(e2e.get("images") or []))
    if not images:
        raise BuildFault("the build carries no raw images for the end-to-end run")
    name, steps, post = e2e["input"], e2e.get("steps") or [], e2e.get("postprocess") or {}
    dtype = next((i.get("dtype") for i in spec["inputs"] if i["name"] == name), "float32") or "float32"
    others = dict((k, v[:1]) for k, v in feeds.items() if k != name)
    runs = min(int(e2e.get("runs") or len(images)), E2E_MAX_RUNS)
    samples = dict((st, []) for st in E2E_STAGES)
    clock = time.perf_counter

    def once(data, keep):
        t0 = clock()
        img = decode_image(data, decoder)
        t1 = clock()
        x = run_pipeline(img, steps)[None].astype(dtype, copy=False)
        t2 = clock()
        outs = run(dict(others, **{name: x}))
        t3 = clock()
        postprocess(outs, post)
        t4 = clock()
        if keep:
            for st, a, b in zip(E2E_STAGES, (t0, t1, t2, t3), (t1, t2, t3, t4)):
                samples[st].append((b - a) * 1e3)

    for data in images:
        once(data, False)
    for i in range(runs):
        once(images[i % len(images)], True)
    return dict(e2e_summary(samples), samples_ms=samples, images=len(images), runs=runs, decoder=decoder,
                decoder_version=version, postprocess=post.get("op", "none"))


def load_npz(build_dir, rel):
    try:
        with np.load(os.path.join(build_dir, rel), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as exc:  # OSError, ValueError, zipfile.BadZipFile...: the file is the build's
        raise BuildFault("reference file %s does not load: %s: %s" % (rel, type(exc).__name__, exc)) from exc


def onnx_input_names(model_path):
    """The main graph's inputs that are not initializers, read from the protobuf (no onnx package
    on the device): GraphProto.input is field 11, initializer 5; ValueInfoProto/TensorProto names
    are fields 1 and 8. None when the file cannot be parsed (the runtime then says why)."""
    try:
        with open(model_path, "rb") as fh:
            buf = fh.read()
        inputs, inits = [], set()
        for field, (a, b) in _fields(buf, 0, len(buf)):
            if field != 7:
                continue
            for f2, (c, d) in _fields(buf, a, b):
                if f2 in (11, 5):
                    want = 1 if f2 == 11 else 8
                    for f3, (e, g) in _fields(buf, c, d):
                        if f3 == want:
                            name = buf[e:g].decode("utf-8", "replace")
                            (inputs.append(name) if f2 == 11 else inits.add(name))
                            break
        return [n for n in inputs if n not in inits]
    except (OSError, ValueError, IndexError):
        return None


def load_reference(build_dir, manifest):
    """The reference inputs (by input name), float outputs and labels of a build. Raises
    BuildFault when they do not fit the manifest (or, for ONNX, the model's input names)."""
    try:
        ref = manifest["reference"]
        names = [i["name"] for i in manifest["inputs"]]
        ins, outs_rel = ref["inputs"], ref["outputs"]
    except (KeyError, TypeError) as exc:
        raise BuildFault("the manifest lacks %s" % exc) from exc
    data = load_npz(build_dir, ins)
    labels = data.pop("labels", None)
    missing = [n for n in names if n not in data]
    if missing:
        raise BuildFault("the reference inputs (%s) have no array for input(s) %s; they hold %s"
                         % (ins, ", ".join(missing), ", ".join(sorted(data)) or "none"))
    for spec in manifest["inputs"]:
        arr, want = data[spec["name"]], spec.get("shape") or []
        if spec.get("dtype") and str(arr.dtype) != spec["dtype"]:
            raise BuildFault("input %s is %s in %s, the manifest says %s" % (spec["name"], arr.dtype, ins, spec["dtype"]))
        if len(want) != arr.ndim or any(isinstance(w, int) and w > 0 and w != a for w, a in zip(want, arr.shape)):
            raise BuildFault("input %s has shape %s in %s, the manifest says %s" % (spec["name"], list(arr.shape), ins, want))
    out_data = load_npz(build_dir, outs_rel)
    keys = ["output_%d" % i for i in range(len(out_data))]
    if not keys or sorted(keys) != sorted(out_data):
        raise BuildFault("the reference outputs (%s) must be output_0, output_1, ...; they hold %s"
                         % (outs_rel, ", ".join(sorted(out_data)) or "none"))
    art = (manifest.get("artifact") or {}).get("path")
    if manifest.get("backend") == "onnx" and art:
        model = onnx_input_names(os.path.join(build_dir, art))
        if model is not None and sorted(model) != sorted(names):
            raise BuildFault("the manifest's inputs (%s) are not the model's (%s)"
                             % (", ".join(names), ", ".join(model) or "none"))
    return {k: data[k] for k in names}, [out_data[k] for k in keys], labels


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


# ---------------------------------------------------------------- timing

def _median(xs):
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
            a = _median(times[-2 * window:-window])
            b = _median(times[-window:])
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


# ---------------------------------------------------------------- interrupts (bench)
# Ctrl-C on the host sends SIGTERM to this process: the bench stops after the run in progress,
# reports the samples measured so far (latency event, ``interrupted``) and exits 130.
EXIT_INTERRUPTED = 130


class Interrupted(BaseException):
    """SIGTERM, SIGINT or SIGHUP (the SSH session gone) while measuring: stop and report."""


def _raise_interrupted(signum, frame):
    raise Interrupted(signum)


def _interruptible(events, build_dir, spec, message):
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


def bench(build_dir, spec):
    """:func:`bench_events`, stopped cleanly by SIGTERM/SIGINT (an ``error`` event of kind
    ``interrupted`` after whatever was measured, exit 130). The handlers are restored after."""
    refused = refuse_spec("bench", spec, build_dir)
    if refused is not None:
        return refused
    return _interruptible(bench_events, build_dir, spec, "stopped by %s")


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


# ---------------------------------------------------------------- bench

def emit(event, **fields):
    fields["event"] = event
    sys.stdout.write(EVENT_PREFIX + json.dumps(fields, allow_nan=True) + "\n")
    sys.stdout.flush()


class RuntimeMissing(Exception):
    pass


def _needed_runtime(spec):
    if spec.get("runner") == "benchmark_bin":
        return "benchmark_bin"
    return {"onnx": "onnxruntime", "lite": "paddlelite"}.get(spec["backend"], spec["backend"])


def _import_runtime(name):
    try:
        if name == "onnxruntime":
            import onnxruntime  # noqa: F401
        elif name == "paddlelite":
            from paddlelite import lite  # noqa: F401
    except ImportError as exc:
        raise RuntimeMissing("%s is not importable by %s (%s)" % (name, sys.executable, exc)) from exc


def jsonable(x):
    if isinstance(x, float) and x != x:
        return None
    return x


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
    _note_in_lease(spec.get("lease"))
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
    needed = _needed_runtime(spec)
    try:
        if needed == "benchmark_bin":
            info = benchmark_bin_info(spec.get("benchmark_bin") or "benchmark_bin")
            if not info["present"]:
                raise RuntimeMissing("benchmark_bin %r: %s" % (spec.get("benchmark_bin"), info.get("error")))
            spec["benchmark_bin"] = info["path"]
        else:
            _import_runtime(needed)
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


def e2e_event(spec, build_dir, run, feeds, settings):
    """The ``end_to_end`` event (bench --end-to-end), after the timed runs; with benchmark_bin
    timing the model, a Python predictor of its own. No Pillow: an ``error`` event, exit 4."""
    try:
        if run is None:
            _import_runtime(_needed_runtime(dict(spec, runner="python")))
            run = make_predictor(spec, build_dir, *settings)
        figures = end_to_end(spec, build_dir, run, feeds)
    except (E2EMissing, RuntimeMissing) as exc:
        emit("error", kind="runtime-missing", runtime="pillow" if isinstance(exc, E2EMissing) else spec["backend"],
             message="bench --end-to-end: %s" % exc)
        return EXIT_RUNTIME_MISSING
    emit("end_to_end", **figures)
    return None


# ---------------------------------------------------------------- per-op profile (bench --profile)
# After the timed runs, onnxruntime's node profiler on a session of its own (graph optimizations
# on, as timed: the nodes are the kernels that ran, e.g. fused QLinearConv), PROFILE_RUNS runs at
# batch 1; each node's median kernel time over the runs, summed per op type.

PROFILE_RUNS = 30
PROFILE_TOP = 40          # nodes kept in the result (every op type is kept)


def aggregate_profile(events):
    """{"by_op", "by_node", "total_ms"} from onnxruntime profile events: per node its median
    kernel time over its runs (ms), per op type the sum over its nodes; shares of the total."""
    nodes = {}
    for ev in events:
        name = ev.get("name", "")
        if ev.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        args = ev.get("args") or {}
        node = nodes.setdefault(name[:-len("_kernel_time")], {"op": args.get("op_name", "?"),
                                                               "provider": args.get("provider"), "us": []})
        node["us"].append(float(ev.get("dur") or 0.0))
    rows = [{"node": n, "op": v["op"], "provider": v["provider"], "ms": _median(v["us"]) / 1e3,
             "runs": len(v["us"])} for n, v in nodes.items()]
    return _profile_rows(rows)


def _profile_rows(rows):
    """{"by_op", "by_node", "total_ms", "nodes"} from per-node rows {"node", "op", "ms", ...}: per
    op type the sum over its nodes; shares of the total."""
    total = sum(r["ms"] for r in rows) or 1e-9
    ops = {}
    for r in rows:
        o = ops.setdefault(r["op"], {"op": r["op"], "ms": 0.0, "nodes": 0})
        o["ms"] += r["ms"]
        o["nodes"] += 1
    by_op = sorted(ops.values(), key=lambda o: -o["ms"])
    by_node = sorted(rows, key=lambda r: -r["ms"])[:PROFILE_TOP]
    for r in by_op + by_node:
        r["share"] = round(r["ms"] / total, 5)
        r["ms"] = round(r["ms"], 5)
    return {"total_ms": round(total, 5), "by_op": by_op, "by_node": by_node, "nodes": len(rows)}


# Paddle Lite's profiler (a build with --with_profile=ON) logs, when the predictor goes away,
# "===== Detailed Dispatch Profiler Summary: <name>, Exclude 1 first-epoch =====", a header and
# one row per kernel instance in program order (lite/core/profile/profiler.cc, v2.13-rc):
# OperatorType KerneAttr(Place) KernelFuncName Remark InDim FilterDim OutDim, then Avg(ms)
# Min(ms) Max(ms) Cur(ms) Per(%) MFLOPs GOPS. The text columns are padded but may be empty, so a
# row is read from the right: seven figures, then the op type first and the place second.
LITE_PROFILE_TITLE = "Detailed Dispatch Profiler Summary"
LITE_PROFILE_FIGURES = 7


def parse_lite_profile(text):
    """Per-kernel rows of Paddle Lite's detailed dispatch summary (the last one in ``text``), or
    None when there is none: [{"node", "op", "place", "kernel", "ms", "min_ms", "max_ms"}]."""
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if LITE_PROFILE_TITLE in ln]
    if not starts:
        return None
    rows = []
    for ln in lines[starts[-1] + 1:]:
        tokens = ln.split()
        if not tokens or tokens[0] == "OperatorType":
            if rows:
                break
            continue
        if ln.startswith(("[", "=====")) or len(tokens) < LITE_PROFILE_FIGURES + 2:
            break
        try:
            avg, mn, mx = (float(t) for t in tokens[-LITE_PROFILE_FIGURES:][:3])
            float(tokens[-LITE_PROFILE_FIGURES + 4].rstrip("%"))
        except ValueError:
            break
        text_cols = tokens[:-LITE_PROFILE_FIGURES]
        rows.append({"node": "%s#%d" % (text_cols[0], len(rows)), "op": text_cols[0], "place": text_cols[1],
                     "kernel": " ".join(text_cols[2:]), "ms": avg, "min_ms": mn, "max_ms": mx})
    return rows


def benchmark_bin_profile(path, model, feeds, spec, runs=PROFILE_RUNS):
    """Paddle Lite's op-time profile from benchmark_bin (one process, ``runs`` repeats after the
    warm-ups), or why there is none: a benchmark_bin built without --with_profile=ON prints
    none."""
    import subprocess

    cmd, cleanup = benchmark_bin_command(path, model, feeds, spec, BENCHMARK_BIN_WARMUPS, runs,
                                         os.path.dirname(model))
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    finally:
        cleanup()
    rows = parse_lite_profile(proc.stdout)
    if proc.returncode != 0:
        tail = " | ".join(proc.stdout.strip().splitlines()[-2:])
        return {"skipped": "benchmark_bin exited %d in the profiling run: %s" % (proc.returncode, tail)}
    if not rows:
        return {"skipped": "%s printed no op-time profile: it was built without Paddle Lite's "
                           "--with_profile=ON; rebuild it with that option for per-op times" % path}
    out = _profile_rows(rows)
    out.update(runs=int(runs), threads=(spec.get("runtime") or {}).get("threads"),
               method="Paddle Lite profiler (benchmark_bin, --with_profile=ON), batch 1; per kernel "
                      "its average dispatch time over the runs after the first")
    return out


def op_profile(spec, model, feeds, threads, runs=PROFILE_RUNS):
    """The artifact's per-op profile on this device (onnxruntime's profiler, or Paddle Lite's
    through benchmark_bin), or why there is none."""
    needed = _needed_runtime(spec)
    if needed == "benchmark_bin":
        return benchmark_bin_profile(spec["benchmark_bin"], model, feeds, spec, runs)
    if needed != "onnxruntime":
        return {"skipped": "the paddlelite Python API has no op profiler; for per-op times name a "
                           "benchmark_bin built with --with_profile=ON in the device's entry"}
    import shutil
    import tempfile

    import onnxruntime as ort

    rt = spec.get("runtime", {})
    tmp = tempfile.mkdtemp(prefix="edgeforge-opprof-")
    try:
        opts = ort.SessionOptions()
        if threads:
            opts.intra_op_num_threads = int(threads)
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "edgeforge-ops")
        sess = ort.InferenceSession(model, sess_options=opts, providers=provider_entries(
            rt.get("execution_providers"), rt.get("provider_options"), None, ort.get_available_providers()))
        names = [i.name for i in sess.get_inputs()]
        for _ in range(int(runs)):
            sess.run(None, {n: feeds[n] for n in names})
        with open(sess.end_profiling()) as fh:
            events = json.load(fh)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = aggregate_profile(events)
    out.update(runs=int(runs), threads=threads, method="onnxruntime profiler, batch 1, graph optimizations "
               "on; per node the median kernel time over the runs")
    return out


DRIFT_BATCH = 64


def drift(spec, build_dir, run, reference, settings):
    """The evaluation set against the float reference. Paddle Lite: a fresh predictor per batch
    size (never the latency predictor, which ran at batch 1); onnxruntime: the timed session."""
    feeds, ref, labels = reference
    extra = {"batch": DRIFT_BATCH}
    if spec["backend"] == "lite":
        try:
            _import_runtime("paddlelite")
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


def _note_in_lease(lease):
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
    return _interruptible(load_events, build_dir, spec, "stopped by %s: the levels measured before are kept")


def load_events(build_dir, spec):
    """The events of a load run, in order."""
    emit("start", pid=os.getpid(), runner_version=RUNNER_VERSION, time=time.time(), mode="load")
    _note_in_lease(spec.get("lease"))
    if spec.get("deadline_s") and hasattr(__import__("signal"), "alarm"):
        import signal
        signal.alarm(max(1, int(spec["deadline_s"] + 0.999)))
    bad = check_files(build_dir, spec.get("files", {}))
    if bad:
        emit("error", kind="digest", files=bad, message="sha256 mismatch for %s" % ", ".join(bad))
        return EXIT_DIGEST
    emit("files", checked=sorted(spec.get("files", {})))
    needed = "numpy" if np is None else _needed_runtime(dict(spec, runner="python"))
    try:
        if np is None:
            raise RuntimeMissing("numpy is not importable by %s" % sys.executable)
        _import_runtime(needed)
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


def spec_command(name, argv, fn, default=None, help=None):
    """``NAME DIR --spec JSON``: parse, run ``fn(DIR, spec)``; a failure is one error event.
    ``default``: the spec when --spec is not given (else it is required)."""
    import argparse
    ap = argparse.ArgumentParser(prog="edgeforge_runner.py " + name)
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


def load_main(argv):
    return spec_command("load", argv, load)


# ---------------------------------------------------------------- smoke (deploy)

EXIT_DRIFT = 6
FLOAT_REL_TOLERANCE = 1e-4      # as the host's verify: a float artifact against Paddle Inference


def smoke_budget(manifest):
    """The drift budget the build was made to: the host's verify rules, the build's own numbers."""
    if manifest.get("precision", "fp32") == "fp32":
        return {"max_rel_error": FLOAT_REL_TOLERANCE}
    ab = manifest.get("accuracy_budget") or {}
    return {"max_accuracy_drop": float(ab.get("budget_points", 1.0) if ab.get("budget_points") is not None else 1.0),
            "min_cosine": float(ab.get("min_cosine") or 0.99)}


def judge_drift(m, budget):
    """(passed, reason): the worst output against ``budget``, as verify judges a build."""
    per = m.get("outputs") or [m]
    if "max_rel_error" in budget:
        worst = max((o.get("rel_max_abs_error") or 0.0) for o in per)
        return worst <= budget["max_rel_error"], "relative error %.2e (budget %.2e)" % (worst, budget["max_rel_error"])
    if m.get("accuracy_drop") is not None and budget.get("max_accuracy_drop") is not None:
        drop = m["accuracy_drop"]
        return drop <= budget["max_accuracy_drop"], "accuracy drop %.2f points (budget %g)" % (
            drop, budget["max_accuracy_drop"])
    worst = min(o.get("cosine", 0.0) for o in per)
    return worst >= budget.get("min_cosine", 0.99), "cosine %.4f (budget >= %g)" % (worst, budget.get("min_cosine", 0.99))


def smoke(release_dir, spec):
    """Load a release with its runtime, run its reference inputs, judge the drift against the
    build's budget (``spec["budget"]`` overrides it). Events: start, files, runtime, smoke, done.
    Exit 0 when the drift is within budget, 6 when it is not."""
    emit("start", pid=os.getpid(), runner_version=RUNNER_VERSION, time=time.time())
    _note_in_lease(spec.get("lease"))
    if spec.get("deadline_s") and hasattr(__import__("signal"), "alarm"):
        __import__("signal").alarm(max(1, int(spec["deadline_s"] + 0.999)))
    bad = check_files(release_dir, spec.get("files", {}))
    if bad:
        emit("error", kind="digest", files=bad, message="sha256 mismatch for %s" % ", ".join(bad))
        return EXIT_DIGEST
    emit("files", checked=sorted(spec.get("files", {})))
    try:
        with open(os.path.join(release_dir, "manifest.json")) as fh:
            manifest = json.load(fh)
    except (OSError, ValueError) as exc:
        raise BuildFault("the release's manifest.json does not load: %s" % exc) from exc
    try:
        if np is None:
            raise RuntimeMissing("numpy is not importable by %s" % sys.executable)
        _import_runtime(_needed_runtime(manifest))
    except RuntimeMissing as exc:
        emit("error", kind="runtime-missing", message=str(exc))
        return EXIT_RUNTIME_MISSING
    threads = (manifest.get("runtime") or {}).get("threads")
    feeds, ref, labels = load_reference(release_dir, manifest)
    made = []
    outs, _ = predict_per_batch_size(lambda: made.append(make_predictor(manifest, release_dir, threads))
                                     or made[-1], feeds)
    emit("runtime", **made[0].runtime)
    m = {k: jsonable(v) for k, v in drift_metrics(outs, ref, labels).items()}
    budget = spec.get("budget") or smoke_budget(manifest)
    passed, reason = judge_drift(m, budget)
    emit("smoke", passed=passed, reason=reason, budget=budget, samples=len(next(iter(feeds.values()))),
         drift={k: v for k, v in m.items() if k != "outputs"}, runtime=made[0].runtime)
    emit("done", time=time.time())
    return EXIT_OK if passed else EXIT_DRIFT


def smoke_main(argv):
    return spec_command("smoke", argv, smoke, default="{}",
                        help="smoke spec as JSON (files, budget, deadline_s, lease)")


# ---------------------------------------------------------------- command line

def main(argv=None):
    import argparse

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "probe":
        ap = argparse.ArgumentParser(prog="edgeforge_runner.py probe")
        ap.add_argument("--benchmark-bin")
        ap.add_argument("--workdir")
        args = ap.parse_args(argv[1:])
        out = probe(args.benchmark_bin, args.workdir)
        out["runner_version"] = RUNNER_VERSION
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
        return EXIT_OK
    if argv and argv[0] == "bench":
        return spec_command("bench", argv[1:], bench)
    if argv and argv[0] == "smoke":
        return smoke_main(argv[1:])
    if argv and argv[0] == "load":
        return load_main(argv[1:])
    ap = argparse.ArgumentParser(description="edgeforge on-device runner")
    ap.add_argument("build_dir")
    args = ap.parse_args(argv)
    with open(os.path.join(args.build_dir, "manifest.json")) as fh:
        manifest = json.load(fh)
    threads = manifest.get("runtime", {}).get("threads")
    feeds, ref, labels = load_reference(args.build_dir, manifest)
    outs, predictors = predict_per_batch_size(lambda: make_predictor(manifest, args.build_dir, threads), feeds)
    json.dump({"drift": drift_metrics(outs, ref, labels), "predictors": predictors}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
