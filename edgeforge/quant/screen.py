"""The bounds of the INT8 float-layer search (:class:`.budget.SearchLimits`) for a quantize pass:
its wall time (``[quantization] max_seconds``, ``--max-search-seconds``), progress lines, and
the screen of each candidate on a small subset of the evaluation set before the whole of it. And what a fit that keeps layers in float costs against plain INT8
(:func:`onnx_cost`).

The screen runs the candidate on the first :data:`SUBSET` samples and rejects it only when it
misses by far: it uses more than twice the budget *and* more than the subset's own noise allows
(with labels, 1.96 standard errors of a share on that many samples). Anything closer runs on the
whole set, which alone decides that a candidate holds. Under a ``[task]`` budget (its metric
has labels of its own) every candidate runs on the whole set.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from .budget import Budget, SearchLimits

SUBSET = 64


def far_off(budget: Budget, m: dict, n: int) -> bool:
    """Whether the subset figure ``m`` (of ``n`` samples) misses the budget by far."""
    if budget.labelled:
        noise = 100.0 * 1.96 * math.sqrt(0.25 / max(n, 1))
        return m["accuracy_drop"] > max(2 * budget.max_accuracy_drop, budget.max_accuracy_drop + noise)
    return (1.0 - m["cosine"]) > 2 * (1.0 - budget.min_cosine)


def search_limits(max_seconds: float | None, budget: Budget, say: Callable[[str], None], predict: Callable,
                  float_out: list | None, labels) -> SearchLimits:
    """The limits of one quantize pass's search: ``predict(model, n)`` runs the first ``n``
    evaluation samples (None: all); ``float_out`` the float model's outputs on all of them."""
    total = len(float_out[0]) if float_out else 0
    screen = None
    if budget.task_drop is None and float_out is not None and total >= 4 * SUBSET:
        ref = [o[:SUBSET] for o in float_out]
        lab = None if labels is None else labels[:SUBSET]

        def screen(model: Path) -> dict | None:
            m = budget.measure(predict(model, SUBSET), ref, lab)
            return m if far_off(budget, m, SUBSET) else None
    return SearchLimits(max_seconds=max_seconds, screen=screen, say=say)


def head(feeds: dict, n: int | None) -> dict:
    """The first ``n`` samples of each feed (None: all of them)."""
    return feeds if n is None else {k: v[:n] for k, v in feeds.items()}


def weight_bytes(path: Path, op_types) -> dict[str, int]:
    """Float bytes of each quantizable node's weight initializer (its second input)."""
    import numpy as np
    import onnx

    graph = onnx.load(str(path)).graph
    sizes = {t.name: 4 * int(np.prod(t.dims)) for t in graph.initializer}
    return {n.name: sizes.get(n.input[1], 0) for n in graph.node if n.op_type in op_types and len(n.input) > 1}


def onnx_cost(plain: Path, kept: Path, speed: dict | None) -> dict:
    """What keeping layers in float cost against plain INT8: the size change (+: larger) and,
    from the host's interleaved timing when there is one, the p50 change (+: slower)."""
    cost = {"size_bytes_int8": plain.stat().st_size, "size_bytes": kept.stat().st_size,
            "size_delta_bytes": kept.stat().st_size - plain.stat().st_size,
            "p50_ms_int8": None, "p50_ms": None, "latency_note": "latency is measured on the device"}
    if speed and speed.get("plain_int8_p50_ms"):
        cost.update(p50_ms_int8=speed["plain_int8_p50_ms"], p50_ms=speed["int8_p50_ms"],
                    latency_note=speed["note"])
    return cost
