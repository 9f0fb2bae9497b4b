"""The ranges a QAT fine-tune learned, as onnxruntime ``TensorQuantOverrides`` on the tuned
model's ONNX graph.

The fine-tune (:mod:`edgeforge.passes.fake_quant`) reports each fake-quantized tensor by its
kernel (a Conv2D or Linear), "in" or "out", and whether an activation was folded into the
output. Each kernel is found in the ONNX graph (Conv, ConvTranspose, Gemm, MatMul with an
initializer weight) by its weights, which are exported unchanged: shape, sum and sum of
squares. A range whose kernel is not found is left to calibration, as PTQ does, and counted
(``skipped``). An "out" range with a folded activation
belongs to the Relu or Clip that reads the kernel's output, whose output onnxruntime quantizes.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

KERNEL_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
FOLDED_ACTIVATIONS = ("Relu", "Clip")


def onnx_overrides(model_path: Path, kernels: list[dict], ranges: list[dict]) -> tuple[dict, dict]:
    """``(overrides, record)``: ``overrides`` maps tensor names to ``[{"rmin", "rmax"}]``
    (empty when the graph does not match); ``record`` says how many were mapped, or why none."""
    import numpy as np
    import onnx

    model = onnx.load(str(model_path))
    weights = {i.name: i for i in model.graph.initializer}
    consumers: dict[str, list] = defaultdict(list)
    for node in model.graph.node:
        for name in node.input:
            consumers[name].append(node)
    nodes = [n for n in model.graph.node if n.op_type in KERNEL_OPS and len(n.input) > 1 and n.input[1] in weights]
    found = _find(nodes, weights, kernels)
    if not found:
        return {}, {"mapped": 0, "ranges": len(ranges), "skipped": len(ranges),
                    "why": f"none of the model's {len(kernels)} Conv2D/Linear layers has its weights in the ONNX graph"}
    out: dict[str, list[float]] = {}
    skipped = 0
    for r in ranges:
        node = found.get(r["kernel"])
        if node is None:
            skipped += 1
            continue
        if r["where"] == "in":
            name = node.input[0]
        else:
            name = node.output[0]
            if r["fused_activation"]:
                after = consumers.get(name, [])
                if len(after) != 1 or after[0].op_type not in FOLDED_ACTIVATIONS:
                    skipped += 1   # the activation is not folded here: calibration decides
                    continue
                name = after[0].output[0]
        lo, hi = r["range"]
        if name in out:
            lo, hi = min(lo, out[name][0]), max(hi, out[name][1])
        out[name] = [float(lo), float(hi)]
    # onnxruntime computes the scale from numpy values
    overrides = {name: [{"rmin": np.float32(lo), "rmax": np.float32(hi)}] for name, (lo, hi) in out.items()}
    return overrides, {"mapped": len(overrides), "ranges": len(ranges), "skipped": skipped}


def _find(nodes: list, weights: dict, kernels: list[dict]) -> dict:
    """kernel index -> the ONNX node whose weight is that kernel's: same shape (or its
    transpose), same sum and sum of squares (relative 1e-5). The exported weights are the
    tuned ones, bit for bit; the graph's node order need not be the model's compute order."""
    import numpy as np
    from onnx import numpy_helper

    stats = []
    for node in nodes:
        w = numpy_helper.to_array(weights[node.input[1]]).astype("float64")
        stats.append((sorted(w.shape), float(w.sum()), float(np.square(w).sum()), float(np.abs(w).sum())))
    found, used = {}, set()
    for i, k in enumerate(kernels):
        for j, (shape, total, sq, mag) in enumerate(stats):
            if j in used or shape != sorted(k["shape"]):
                continue
            if abs(total - k["sum"]) <= 1e-5 * (mag + 1e-12) and abs(sq - k["sumsq"]) <= 1e-5 * (sq + 1e-12):
                found[i] = nodes[j]
                used.add(j)
                break
    return found
