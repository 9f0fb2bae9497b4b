"""Where onnxruntime places an ONNX model's nodes (execution provider per node), read from a
profiling run with graph optimizations off."""
from __future__ import annotations

import json

from .onnx_proto import onnx_nodes
from .predictors import onnx_predictor


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
