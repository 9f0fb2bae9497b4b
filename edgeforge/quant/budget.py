"""Accuracy budget: when INT8 drifts too far, keep the most sensitive layers in float.

A per-layer sensitivity analysis ranks the quantized layers by how much quantization noise they
add (signal-to-quantization-noise ratio of the tensors they read, measured against the float
model on evaluation samples). The loop then keeps the worst layers in float, re-quantizes and
re-evaluates, until the accuracy drop is within the budget.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np


def sqnr_db(ref: np.ndarray, noisy: np.ndarray) -> float:
    ref = np.asarray(ref, dtype=np.float64).ravel()
    noise = ref - np.asarray(noisy, dtype=np.float64).ravel()
    p_noise = float(np.sum(noise * noise))
    p_sig = float(np.sum(ref * ref))
    if p_noise == 0:
        return float("inf")
    if p_sig == 0:
        return float("-inf")
    return 10.0 * np.log10(p_sig / p_noise)


def accuracy_drop(outputs: list[np.ndarray], reference: list[np.ndarray], labels) -> float:
    """Points of accuracy lost against labels; without labels, points of top-1 disagreement."""
    out = np.asarray(outputs[0]).reshape(len(outputs[0]), -1).argmax(1)
    ref = np.asarray(reference[0]).reshape(len(reference[0]), -1).argmax(1)
    if labels is not None:
        lab = np.asarray(labels)
        return float((np.mean(ref == lab) - np.mean(out == lab)) * 100.0)
    return float((1.0 - np.mean(out == ref)) * 100.0)


def worst_cosine(outputs: list[np.ndarray], reference: list[np.ndarray]) -> float:
    """The lowest mean per-sample cosine over all outputs (verify judges the worst output)."""
    from ..runner.metrics import drift_metrics

    return min((o["cosine"] for o in drift_metrics(outputs, reference)["outputs"] if o["cosine"] is not None),
               default=1.0)


@dataclass(frozen=True)
class Budget:
    """What INT8 must hold, judged exactly as ``verify`` judges it: with labels, the accuracy
    drop in points; without labels, the worst output's cosine against the float model; with a
    ``[task]``, the drop of the task's metric in points (``task_drop(outputs, reference)``)."""
    max_accuracy_drop: float
    min_cosine: float
    labelled: bool
    label_output: int = 0          # [data] label_output: the output the labels are for
    task_drop: Callable[[list, list], float] | None = None
    task_metric: str = ""          # the metric task_drop measures, for the messages

    def measure(self, outputs, reference, labels) -> dict:
        k = self.label_output
        if self.task_drop is not None:
            drop = self.task_drop(outputs, reference)
        else:
            drop = accuracy_drop(outputs[k:k + 1], reference[k:k + 1], labels)
        cos = round(worst_cosine(outputs, reference), 6)
        if not self.labelled and self.task_drop is None:
            # no labels: judged by cosine; the top-1 disagreement is no accuracy (manifest: none)
            return {"accuracy_drop": None, "top1_disagreement": round(drop, 4), "cosine": cos}
        return {"accuracy_drop": round(drop, 4), "cosine": cos}

    def met(self, m: dict) -> bool:
        if self.labelled or self.task_drop is not None:
            return m["accuracy_drop"] <= self.max_accuracy_drop
        return m["cosine"] >= self.min_cosine

    def share(self, m: dict) -> float | None:
        """The part of the budget ``m`` uses (1.0: all of it; never below 0), in the terms
        :meth:`met` judges by; None for a budget of zero."""
        if self.labelled or self.task_drop is not None:
            used, allowed = m["accuracy_drop"], self.max_accuracy_drop
        else:
            used, allowed = 1.0 - m["cosine"], 1.0 - self.min_cosine
        return max(used / allowed, 0.0) if allowed > 0 else None

    def describe(self) -> str:
        if self.task_drop is not None:
            return f"{self.task_metric or 'task metric'} drop <= {self.max_accuracy_drop:g} points"
        return (f"accuracy drop <= {self.max_accuracy_drop:g} points" if self.labelled
                else f"cosine >= {self.min_cosine:g} (no labels)")

    def figure(self, m: dict) -> str:
        if self.task_drop is not None:
            return f"{self.task_metric or 'task metric'} drop {m['accuracy_drop']:.2f} points"
        return f"drop {m['accuracy_drop']:.2f} points" if self.labelled else f"cosine {m['cosine']:.4f}"


DEFAULT_MAX_SECONDS = 240.0       # [quantization] max_seconds: the float-layer search's wall time


@dataclass
class SearchLimits:
    """What bounds the float-layer search: ``max_seconds`` of wall time (checked before each
    attempt: one attempt may run past it), ``max_rounds`` of doubling, ``screen(model)``: False
    when a small subset of the evaluation set already shows the candidate misses by far (the
    whole set then is not run), ``say(line)``: progress, the candidate and the best so far."""
    max_seconds: float | None = DEFAULT_MAX_SECONDS
    max_rounds: int = 8
    screen: Callable[[Path], dict | None] | None = None
    say: Callable[[str], None] | None = None


@dataclass
class BudgetResult:
    budget: Budget
    keep_float: list[str]
    algo: str
    initial: dict
    final: dict
    met: bool
    quantizable_layers: int = 0
    ranking: list[tuple[str, float]] = field(default_factory=list)   # (layer, SQNR dB), worst first
    attempts: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    stopped: str | None = None     # why the search ended before the budget held ("max_seconds")
    max_seconds: float | None = None

    def to_json(self) -> dict:
        criterion = "accuracy_drop" if self.budget.labelled else "cosine"
        if self.budget.task_drop is not None:
            criterion = f"task:{self.budget.task_metric}"
        return {"criterion": criterion,
                "budget_points": self.budget.max_accuracy_drop, "min_cosine": self.budget.min_cosine,
                "describe": self.budget.describe(),
                "initial": self.initial, "final": self.final,
                "initial_drop": self.initial["accuracy_drop"], "final_drop": self.final["accuracy_drop"],
                "met": self.met, "algo": self.algo, "keep_float": self.keep_float,
                "quantizable_layers": self.quantizable_layers,
                "sensitivity": [{"layer": n, "sqnr_db": round(v, 2)} for n, v in self.ranking[:10]],
                "attempts": self.attempts, "seconds": round(self.seconds, 2),
                "max_seconds": self.max_seconds, "stopped": self.stopped}


def fit_budget(quantize: Callable[[str, list[str]], Path], evaluate: Callable[[Path], dict],
               rank: Callable[[Path], list[tuple[str, float]]], budget: Budget, algos: tuple[str, ...],
               base_keep: list[str], limits: SearchLimits | None = None, quantizable_layers: int = 0,
               ) -> tuple[Path, BudgetResult]:
    """Quantize with ``algos[0]``; on a miss, first try the other calibration algorithms
    (``algos[1:]``: free in size and speed), then keep the worst layers of the best one in float, 1, 2, 4, ... more
    per round (ranked again on each round's model), until the budget holds; then bisect back to the fewest of them that still hold
    (the doubling overshoots by up to half). Every attempt is recorded. ``limits``
    (:class:`SearchLimits`): past ``max_seconds`` no new attempt starts; the best attempt that
    holds ships, or, when none held, the closest (``met`` False, ``stopped`` says why)."""
    lim = limits if limits is not None else SearchLimits(max_seconds=None)
    t0 = time.perf_counter()
    keep = list(base_keep)
    attempts: list[dict] = []
    say = lim.say or (lambda line: None)
    best_met: list = []            # (model, m, algo, keep) of the fewest float layers that held

    def out_of_time() -> bool:
        return lim.max_seconds is not None and time.perf_counter() - t0 >= lim.max_seconds

    def attempt(a: str, k: list[str]) -> tuple[Path, dict]:
        model = quantize(a, k)
        screened = lim.screen(model) if lim.screen is not None and len(attempts) else None
        m = screened if screened is not None else evaluate(model)
        attempts.append({"algo": a, "kept": len(k), **m, **({"screened": True} if screened is not None else {}),
                         "at_s": round(time.perf_counter() - t0, 2)})
        if budget.met(m) and (not best_met or len(k) < len(best_met[0][3])):
            best_met[:] = [(model, m, a, list(k))]
        shown = budget.figure(best_met[0][1]) + f" ({len(best_met[0][3])} float)" if best_met else "none within the budget"
        say(f"search: {a}, {len(k)} layer(s) in float: {budget.figure(m)}"
            + (" (subset: far off)" if screened is not None else "") + f"; best so far: {shown}; "
            f"{time.perf_counter() - t0:.0f}s" + (f" of {lim.max_seconds:g}s" if lim.max_seconds else ""))
        return model, m

    algo, *other_algos = algos
    model, m = attempt(algo, keep)
    initial = m
    result = BudgetResult(budget, list(keep), algo, initial, m, budget.met(m),
                          quantizable_layers=quantizable_layers, attempts=attempts, max_seconds=lim.max_seconds)
    best = (model, m, algo)
    for cand in other_algos:
        if budget.met(best[1]) or out_of_time():
            break
        model, m = attempt(cand, keep)
        if better(budget, m, best[1]):
            best = (model, m, cand)
    model, m, algo = best
    if not budget.met(m):
        base = list(keep)
        names: list[str] = []             # the layers added, in the order they were added
        step, lo, hi = 1, 0, 0            # lo: most added layers known to miss; hi: tried last
        for round_ in range(lim.max_rounds):
            if out_of_time():
                result.stopped = "max_seconds"
                break
            # re-ranked on the last attempt: once a layer is float, the next one's own loss shows
            # (mobilenet_v1: its first depthwise conv ranks low until the first conv is float)
            ranking = [r for r in rank(model) if r[0] not in base and r[0] not in names]
            if round_ == 0:
                result.ranking = ranking
            if not ranking:
                break
            names += [name for name, _ in ranking[:step]]
            lo, hi = hi, len(names)
            step *= 2
            trial_model, trial = attempt(algo, base + names)
            if "screened" not in attempts[-1]:        # a subset figure never stands for a model
                model, m, keep = trial_model, trial, base + names
            if budget.met(trial):
                break
        # the doubling overshoots: bisect back to the fewest float layers that still hold
        if budget.met(m):
            while hi - lo > 1:
                if out_of_time():
                    result.stopped = "max_seconds"
                    break
                mid = (lo + hi) // 2
                trial_model, trial = attempt(algo, base + names[:mid])
                if budget.met(trial):
                    hi, model, m = mid, trial_model, trial
                else:
                    lo = mid
            keep = base + names[:hi]
    if best_met and not budget.met(m):          # out of time after a candidate held: ship that one
        model, m, algo, keep = best_met[0]
    result.keep_float, result.algo, result.final, result.met = keep, algo, m, budget.met(m)
    result.seconds = time.perf_counter() - t0
    return model, result


def float_regions(keep: list[str], order: list[str]) -> int:
    """How many contiguous runs of layers ``keep`` forms along ``order`` (the graph's
    quantizable layers in order): each run costs a quantize/dequantize boundary on each side."""
    idx = sorted({order.index(k) for k in keep if k in order})
    return sum(1 for i, j in enumerate(idx) if i == 0 or j != idx[i - 1] + 1)


def contiguous_alternatives(keep: list[str], order: list[str], base: list[str] = (),
                            max_gap: int = 2) -> list[list[str]]:
    """Float sets that hold at least ``keep`` with fewer or cheaper boundaries: the gaps of up
    to ``max_gap`` layers between float layers filled (one region instead of two), and then a
    region near the graph's input or output stretched to it (a float stem or head needs no
    boundary on that side). Each is ``base`` + layers in graph order; none equals ``keep``."""
    idx = sorted({order.index(k) for k in keep if k in order and k not in base})
    if not idx:
        return []
    filled = set(idx)
    for a, b in zip(idx, idx[1:]):
        if 0 < b - a - 1 <= max_gap:
            filled.update(range(a + 1, b))
    ends = set(filled)
    if min(ends) <= max_gap:
        ends.update(range(0, min(ends)))
    if max(ends) >= len(order) - 1 - max_gap:
        ends.update(range(max(ends), len(order)))
    out, seen = [], {tuple(sorted(keep))}
    for cand in (filled, ends):
        names = list(base) + [order[i] for i in sorted(cand) if order[i] not in base]
        if tuple(sorted(names)) not in seen:
            seen.add(tuple(sorted(names)))
            out.append(names)
    return out


def alternatives_within(keep: list[str], order: list[str], base: list[str], weights: dict[str, int],
                        share: float) -> tuple[list[list[str]], list[list[str]]]:
    """:func:`contiguous_alternatives` split into those that add at most ``share`` of all the
    ``weights`` (float bytes per layer) in float over ``keep``, and those that add more (an INT8
    model in substance stays one): ``(within, beyond)``."""
    total = max(1, sum(weights.values()))
    kept = sum(weights.get(k, 0) for k in keep)
    within, beyond = [], []
    for alt in contiguous_alternatives(keep, order, base):
        extra = sum(weights.get(k, 0) for k in alt) - kept
        (within if extra <= share * total else beyond).append(alt)
    return within, beyond


def better(budget: Budget, a: dict, b: dict) -> bool:
    if budget.labelled or budget.task_drop is not None:
        return (a["accuracy_drop"], -a["cosine"]) < (b["accuracy_drop"], -b["cosine"])
    return a["cosine"] > b["cosine"]


# ---------------------------------------------------------------- ONNX (QDQ) sensitivity

def onnx_rank(float_model: Path, qdq_model: Path, feeds: dict[str, np.ndarray], workdir: Path) -> list[tuple[str, float]]:
    """Rank quantized ONNX nodes, worst first, by the fidelity they lose to quantization: the SQNR
    (against the float model) of what reaches them minus the SQNR of what they produce. A layer
    downstream of a damaged one inherits low SQNR but loses little itself, so it ranks low."""
    import onnx
    from onnxruntime.quantization.calibrate import CalibrationDataReader
    from onnxruntime.quantization.qdq_loss_debug import (collect_activations, create_activation_matching,
                                                         modify_model_output_intermediate_tensors)

    from .onnx_ptq import INT8_KERNEL_OP_TYPES

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter([feeds])

        def get_next(self):
            return next(self._it, None)

    aug_f, aug_q = workdir / "float.aug.onnx", workdir / "qdq.aug.onnx"
    modify_model_output_intermediate_tensors(str(float_model), str(aug_f), save_as_external_data=False)
    modify_model_output_intermediate_tensors(str(qdq_model), str(aug_q), save_as_external_data=False)
    f_act = collect_activations(str(aug_f), Reader())
    q_act = collect_activations(str(aug_q), Reader())
    matching = create_activation_matching(q_act, f_act)

    def sq(name: str, which: str) -> float | None:
        m = matching.get(name)
        if not m or "float" not in m or which not in m:
            return None
        return min(sqnr_db(f, q) for f, q in zip(m["float"], m[which]))

    model = onnx.load(str(qdq_model))
    dq_src = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    q_src = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    ranking = []
    for node in model.graph.node:
        if node.op_type not in INT8_KERNEL_OP_TYPES or not node.name:
            continue
        # SQNR of what arrives (before this node's input quantization) and of what leaves.
        ins = [sq(src, "pre_qdq") for src in (q_src.get(dq_src.get(i, ""), None) for i in node.input) if src]
        ins = [v for v in ins if v is not None]
        out = sq(node.output[0], "pre_qdq")
        if not ins or out is None:
            continue
        damage = min(ins) - out          # dB of fidelity this layer loses to quantization
        ranking.append((node.name, out, damage))
    ranking.sort(key=lambda item: -item[2])
    ranking = [(name, out) for name, out, _ in ranking]
    for f in (aug_f, aug_q):
        f.unlink(missing_ok=True)
    return ranking


# ---------------------------------------------------------------- Paddle (fake-quant program) sensitivity

PADDLE_QUANTIZABLE = ("conv2d", "depthwise_conv2d", "conv2d_transpose", "mul", "matmul", "matmul_v2")
_WEIGHT_SLOTS = ("Filter", "Y")


def paddle_layers(model_dir: Path) -> list[dict]:
    """Quantizable layers of a float program: weight name (the layer id PTQ can skip), the
    activation input and the output var."""
    from ..paddle_env import load_program, private_scope, static_mode

    layers = []
    with static_mode() as paddle, private_scope(paddle) as (_, exe):
        prog, _, _ = load_program(model_dir, exe)
        block = prog.global_block()
        for op in block.ops:
            if op.type not in PADDLE_QUANTIZABLE:
                continue
            weight = next((op.input(s)[0] for s in _WEIGHT_SLOTS if s in op.input_names and op.input(s)
                           and block.has_var(op.input(s)[0]) and block.var(op.input(s)[0]).persistable), None)
            act_slot = "Input" if "Input" in op.input_names else "X"
            if weight is None or not op.input(act_slot):
                continue
            layers.append({"layer": weight, "op": op.type, "input": op.input(act_slot)[0],
                           "output": op.output_arg_names[0]})
    return layers


def paddle_fetch(model_dir: Path, feeds: dict, names: list[str]) -> dict[str, np.ndarray]:
    """Fetch vars by their float-program names. In a frozen fake-quant program a quantized op
    writes integer-scaled values that a dequantize op then rescales: read the rescaled one."""
    from ..paddle_env import load_program, private_scope, static_mode

    with static_mode() as paddle, private_scope(paddle) as (_, exe):
        prog, feed_names, _ = load_program(model_dir, exe)
        block = prog.global_block()
        dequant = {op.input("X")[0]: op.output("Out")[0] for op in block.ops
                   if "dequantize" in op.type and "X" in op.input_names and op.input("X")}
        present = [n for n in names if block.has_var(n)]
        actual = [dequant.get(n, n) for n in present]
        outs = exe.run(prog, feed={k: feeds[k] for k in feed_names}, fetch_list=actual)
    return dict(zip(present, (np.asarray(o) for o in outs)))


def paddle_rank(float_dir: Path, quant_dir: Path, feeds: dict) -> list[tuple[str, float]]:
    """Rank the quantizable layers of a Paddle fake-quant program, worst first, by the fidelity
    each loses: SQNR of its input minus SQNR of its output, both against the float program."""
    layers = paddle_layers(float_dir)
    names = sorted({v for layer in layers for v in (layer["input"], layer["output"])})
    ref = paddle_fetch(float_dir, feeds, names)
    got = paddle_fetch(quant_dir, feeds, names)
    ranking = []
    for layer in layers:
        i, o = layer["input"], layer["output"]
        if o not in ref or o not in got:
            continue
        s_in = sqnr_db(ref[i], got[i]) if i in ref and i in got else float("inf")
        s_out = sqnr_db(ref[o], got[o])
        damage = (s_in if np.isfinite(s_in) else 200.0) - s_out
        ranking.append((layer["layer"], s_out, damage))
    ranking.sort(key=lambda item: -item[2])
    return [(name, s_out) for name, s_out, _ in ranking]
