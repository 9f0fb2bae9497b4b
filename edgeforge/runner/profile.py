"""``bench --profile``: time per operator, from onnxruntime's profiler or Paddle Lite's
``benchmark_bin`` profile build, aggregated by node and by op type."""
from __future__ import annotations

import json
import os

from .predictors import provider_entries
from .protocol import needed_runtime
from .timing import BENCHMARK_BIN_WARMUPS, median, benchmark_bin_command


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
    rows = [{"node": n, "op": v["op"], "provider": v["provider"], "ms": median(v["us"]) / 1e3,
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
    needed = needed_runtime(spec)
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
