"""What the float model itself loses when only its input is rounded to INT8.

A graph with every layer INT8 quantizes its input: the first kernel reads it as 8-bit integers
(QuantizeLinear on the graph input, with the scale and zero point calibration chose). That
rounding is there before any layer is quantized, and the float model's own sensitivity to it
is a floor under what PTQ or QAT can reach with every layer INT8: a fine-tune only sees the
rounded input. Measured on the zoo's briefly trained models (docs/qat.md, 2026-12-05): the
8-bit rounding of the input alone costs mobilenet_v2 35 % of a 0.99 cosine budget and
shufflenet_v2 49 %; trained four times as long, shufflenet_v2 and mobilenet_v1 10-11 %.

:func:`input_rounding` rounds the evaluation inputs exactly as the shipped graph does (each
graph input's QuantizeLinear: its scale, zero point and integer type, round half to even), runs
the *float* model on them and judges the result with the build's own budget.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

_RANGES = {np.dtype("uint8"): (0, 255), np.dtype("int8"): (-128, 127)}


def input_grids(model: Path) -> dict[str, tuple[float, int, tuple[int, int]]]:
    """Each graph input that a per-tensor QuantizeLinear reads directly: (scale, zero point,
    the integer type's range). Inputs read in float (a layer kept in float) are absent."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(model), load_external_data=False).graph
    inits = {t.name: t for t in graph.initializer}
    inputs = {i.name for i in graph.input} - set(inits)
    grids = {}
    for node in graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] not in inputs or len(node.input) < 3:
            continue
        if node.input[1] not in inits or node.input[2] not in inits:
            continue
        scale = numpy_helper.to_array(inits[node.input[1]])
        zero = numpy_helper.to_array(inits[node.input[2]])
        if scale.size != 1 or zero.dtype not in _RANGES:
            continue
        grids[node.input[0]] = (float(scale.reshape(())), int(zero.reshape(())), _RANGES[zero.dtype])
    return grids


def round_inputs(feeds: dict[str, np.ndarray], grids: dict) -> dict[str, np.ndarray]:
    """``feeds`` with each input in ``grids`` quantized and dequantized as QuantizeLinear and
    DequantizeLinear compute it (round half to even, saturating)."""
    out = dict(feeds)
    for name, (scale, zero, (qmin, qmax)) in grids.items():
        if name not in feeds or not np.issubdtype(feeds[name].dtype, np.floating):
            continue
        x = feeds[name].astype(np.float32)
        q = np.clip(np.rint(x / np.float32(scale)) + zero, qmin, qmax)
        out[name] = ((q - zero) * np.float32(scale)).astype(feeds[name].dtype)
    return out


def input_rounding(model: Path, feeds: dict[str, np.ndarray], reference: list, labels,
                   run_float: Callable[[dict], list], budget) -> dict | None:
    """The float model (``run_float``) on the evaluation inputs rounded as ``model`` rounds them,
    against its outputs on the inputs as they are (``reference``), in ``budget``'s terms.
    ``share_of_budget``: the part of the budget this rounding uses by itself (1.0: all of it). None when
    the graph rounds no input (its first layer kept in float)."""
    grids = input_grids(model)
    if not grids:
        return None
    m = budget.measure(run_float(round_inputs(feeds, grids)), reference, labels)
    share = budget.share(m)
    return {"inputs": sorted(grids), "measured": m, "figure": budget.figure(m),
            "share_of_budget": None if share is None else round(share, 4),
            "grid": {k: {"scale": s, "zero_point": z, "range": list(r)} for k, (s, z, r) in grids.items()}}


def advice(probe: dict | None) -> str:
    """The sentence a missed budget gets when the input's rounding alone takes a large part
    of it (a quarter or more): the model, not the fine-tune, is what stops every layer INT8."""
    if not probe or probe.get("share_of_budget") is None or probe["share_of_budget"] < 0.25:
        return ""
    return (f"; rounding only the input to INT8 costs the float model {probe['share_of_budget']:.0%} "
            f"of the budget ({probe['figure']}): train it further, or keep layers in float")
