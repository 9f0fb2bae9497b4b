"""quantize: INT8 post-training quantization on the project's real calibration data.

Two implementations, chosen by backend:
- quantize.ptq (Paddle Lite path): Paddle's PostTrainingQuantization on the legacy program,
  KL calibration by default, channel-wise weights; the result keeps the float program beside it.
- quantize.onnx (ONNX path): onnxruntime's static QDQ quantizer on the converted float ONNX,
  after its documented pre-processing (TOOLCHAIN trap 8), entropy (KL) calibration by default.

Both run the accuracy budget (``search_and_fit``): INT8 must hold what verify checks (accuracy
drop with labels, worst-output cosine without); on a miss, the other calibrations first (unless
``--calibration`` pinned one), then the most sensitive layers in float.
"""
from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import Literal, Optional

import numpy as np
from pydantic import Field

from ..build_meta import AccuracyBudget, Attempt, BuildMeta, Quantization, Scheme, SpeedRow
from ..errors import PassError
from ..paddle_env import private_scope, static_mode
from ..quant.onnx_ptq import INT8_KERNEL_OP_TYPES, QuantRun
from ..quant.ptq_weights import ptq_class, record_odd_weights
from ..quant.screen import head, onnx_cost, search_limits, weight_bytes
from .base import FLOAT_FILE_ONNX, ONNX, PADDLE_FLOAT, PADDLE_INT8, Artifact, Pass, PassConfig, PassContext, register

QUANTIZABLE = ["conv2d", "depthwise_conv2d", "conv2d_transpose", "mul", "matmul", "matmul_v2"]


class QuantConfig(PassConfig):
    algo: Literal["KL", "hist", "mse", "avg", "abs_max"] = "KL"
    calibration_batches: int = Field(10, gt=0)
    batch_size: int = Field(32, gt=0)
    per_channel_weights: bool = True
    keep_float: list[str] = []
    max_accuracy_drop: Optional[float] = None   # points; None = no budget loop in this pass
    min_cosine: float = Field(0.99, gt=0, le=1)  # the budget when the evaluation set has no labels
    calibration_search: bool = False
    float_fallback: bool = True                 # on a budget miss: other calibrations, then float layers
    max_seconds: Optional[float] = Field(None, gt=0)   # the float-layer search's wall time (quant/screen.py)
    algo_fixed: bool = False                    # --calibration given: the fallback keeps that algorithm
    data_digest: str = ""           # sha256 of the calibration file: new data, new cache key
    eval_digest: str = ""           # sha256 of the evaluation file (budget and search use it)


def calibration_batches(ctx: PassContext, cfg: QuantConfig) -> list[dict[str, np.ndarray]]:
    data = ctx.project.load_data("calibration")
    names = [s.name for s in ctx.project.inputs]
    n = len(data[names[0]])
    batches = []
    for b in range(cfg.calibration_batches):
        lo = b * cfg.batch_size
        if lo >= n or (batches and n - lo < cfg.batch_size):
            break       # no ragged last batch: onnxruntime's histogram calibrators stack the batches
        batches.append({k: data[k][lo:lo + cfg.batch_size] for k in names})
    return batches


@contextlib.contextmanager
def quiet_stdout():
    """Library chatter (print, logging, tqdm) would tear the progress display; send it away."""
    import io
    import logging

    logging.disable(logging.INFO)      # paddle's quantization loggers carry their own handlers
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield sink
    finally:
        logging.disable(logging.NOTSET)


@contextlib.contextmanager
def _fast_kl(algo: str, record: dict):
    """Paddle's KL/hist calibration through edgeforge.quant.kl's fast paths; ``record`` gets
    whether they took (``{"enabled", "reason"}``), for the manifest."""
    if algo not in ("KL", "hist"):
        yield
        return
    try:
        from ..quant.kl import fast_kl
    except ImportError as exc:
        record.update(enabled=False, reason=f"edgeforge.quant.kl did not import: {exc}")
        yield
        return
    with fast_kl() as status:
        record.update(status)
        yield


@register
class PaddlePTQPass(Pass):
    name = "quantize.ptq"
    version = 3
    consumes = frozenset({PADDLE_FLOAT})
    produces = PADDLE_INT8
    Config = QuantConfig

    def _ptq(self, float_dir: Path, out_dir: Path, batches, algo: str, keep: list[str], found: tuple) -> Path:
        """``found``: this run's (fast-KL record, weights Paddle's PTQ cannot take), filled in."""
        fast_kl, odd_weights = found
        cfg: QuantConfig = self.config
        with static_mode() as paddle, _fast_kl(algo, fast_kl), quiet_stdout(), \
                private_scope(paddle) as (scope, exe):
            from paddle.static.quantization import PostTrainingQuantization

            ptq = ptq_class(PostTrainingQuantization, odd_weights)(
                executor=exe, scope=scope, model_dir=str(float_dir),
                model_filename="model.pdmodel", params_filename="model.pdiparams",
                data_loader=lambda: iter(batches), batch_nums=len(batches), algo=algo,
                quantizable_op_type=QUANTIZABLE, onnx_format=False,
                weight_quantize_type="channel_wise_abs_max" if cfg.per_channel_weights else "abs_max",
                skip_tensor_list=list(keep) or None,
            )
            ptq.quantize()
            ptq.save_quantized_model(str(out_dir), model_filename="model.pdmodel",
                                     params_filename="model.pdiparams")
        if not (out_dir / "model.pdmodel").is_file():
            raise PassError(self.name, "PostTrainingQuantization wrote no model")
        return out_dir

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        from ..paddle_env import paddle_inference
        from ..quant import degenerate
        from ..quant.budget import paddle_layers, paddle_rank

        cfg: QuantConfig = self.config
        # what this run finds (never kept on the pass): the fast-KL record, and the weights
        # Paddle's PTQ cannot take (kept in float)
        fast_kl, odd_weights = {}, []
        batches = calibration_batches(ctx, cfg)
        n_cal = sum(len(next(iter(b.values()))) for b in batches)
        scratch = ctx.workdir / "quantize-ptq"
        scratch.mkdir(exist_ok=True)
        counter = iter(range(10_000))
        feeds, labels = evaluation_set(ctx)

        def quantize(algo: str, keep: list[str]) -> Path:
            ctx.log(f"PTQ {algo} on {n_cal} calibration samples ({len(keep)} layers in float)")
            return self._ptq(inp.path, scratch / f"q{next(counter)}", batches, algo, keep, (fast_kl, odd_weights))

        # Paddle Inference on the fake-quant program simulates the INT8 arithmetic on the host.
        model, meta, plain = search_and_fit(
            cfg, ctx, quantize, predict=lambda m, n=None: paddle_inference(m, head(feeds, n)),
            reference=lambda: paddle_inference(inp.path, feeds), labels=labels,
            rank=lambda m: paddle_rank(inp.path, m, {k: v[:64] for k, v in feeds.items()}),
            layers=lambda: len(paddle_layers(inp.path)))
        for p in model.iterdir():
            shutil.copy2(p, out_dir / p.name)
        shutil.copytree(inp.path, out_dir / "float")
        meta.precision = "int8"
        meta.carry(inp.meta, "rewrites", "prune")
        record_odd_weights(meta, odd_weights, ctx.log)
        degenerate.note_fast_kl(meta, fast_kl, ctx.log)     # quantization.fast_kl, degenerate_ranges
        if meta.accuracy_budget is not None:
            meta.accuracy_budget.simulated = True
            meta.accuracy_budget.note = "measured on the host with Paddle Inference on the fake-quant program"
        if plain is not None:
            # convert.lite measures the size cost against plain INT8 from this copy
            shutil.copytree(plain(), out_dir / "plain_int8")
        return meta


CANDIDATE_ALGOS = ("KL", "hist", "mse", "avg")


def search_and_fit(cfg: QuantConfig, ctx: PassContext, quantize, predict, reference, labels, rank, layers):
    """Calibration search and the accuracy budget, shared by both quantize passes.

    ``quantize(algo, keep)`` writes a model, ``predict(model)`` runs it on the evaluation set
    (host runtime or simulation), ``reference()`` is the float model's outputs. Returns the
    model, the manifest fields, and (when layers were kept in float) a callable that writes
    plain INT8 with the same algorithm, for the cost comparison."""
    from ..quant.budget import better, fit_budget

    budget = make_budget(cfg, ctx, labels)
    fallback = cfg.max_accuracy_drop is not None and cfg.float_fallback
    float_out = reference() if (cfg.calibration_search or fallback) else None
    algo = cfg.algo
    search = []
    if cfg.calibration_search:
        for cand in CANDIDATE_ALGOS:
            ctx.log(f"calibration search: {cand}")
            m = budget.measure(predict(quantize(cand, cfg.keep_float)), float_out, labels)
            search.append({"algo": cand, **m})
        pick = search[0]
        for r in search[1:]:
            if better(budget, r, pick):
                pick = r
        algo = pick["algo"]
        ctx.log(f"calibration search picked {algo}")
    meta = BuildMeta(quantization=Quantization(**{**cfg.model_dump(exclude={"data_digest", "eval_digest"}), "algo": algo}))
    if search:
        meta.calibration_search = search
    if not fallback:
        meta.keep_float = list(cfg.keep_float)
        return quantize(algo, list(cfg.keep_float)), meta, None
    others = () if (cfg.calibration_search or cfg.algo_fixed) else tuple(a for a in CANDIDATE_ALGOS if a != algo)
    model, fit = fit_budget(quantize, lambda m: budget.measure(predict(m), float_out, labels), rank, budget,
                            (algo, *others), list(cfg.keep_float),
                            search_limits(cfg.max_seconds, budget, ctx.log, predict, float_out, labels),
                            quantizable_layers=layers())
    if fit.met and fit.attempts[0] is not fit.attempts[-1]:
        ctx.log(f"accuracy budget ({budget.describe()}): {fit.algo}, {len(fit.keep_float)} layer(s) in float, "
                f"{budget.figure(fit.final)}")
    meta.quantization.algo = fit.algo
    meta.keep_float = list(fit.keep_float)
    meta.accuracy_budget = AccuracyBudget.model_validate(fit.to_json())
    plain = None
    if len(fit.keep_float) > len(cfg.keep_float):
        def plain():
            return quantize(fit.algo, list(cfg.keep_float))
    return model, meta, plain


def make_budget(cfg: QuantConfig, ctx: PassContext, labels):
    from ..quant.budget import Budget

    limit = cfg.max_accuracy_drop if cfg.max_accuracy_drop is not None else 1.0
    sec = ctx.project.spec.task
    if sec is not None and (sec.kind != "classification" or sec.max_metric_drop is not None or sec.metric):
        drop, metric = task_drop(ctx)
        return Budget(sec.max_metric_drop if sec.max_metric_drop is not None else limit, cfg.min_cosine,
                      labelled=False, label_output=ctx.project.spec.data.label_output, task_drop=drop,
                      task_metric=metric)
    return Budget(limit, cfg.min_cosine, labelled=labels is not None,
                  label_output=ctx.project.spec.data.label_output)


def task_drop(ctx: PassContext):
    """The budget's measure under a ``[task]``: points of the task metric lost against the
    float model (its labels, or its own answers), the same record verify writes."""
    from ..task.evaluate import evaluate, has_labels, primary
    from ..task.metrics import cosine
    from ..task.user import user_metric

    sec = ctx.project.spec.task
    data = ctx.project.load_data("evaluation")
    names = {sp.name for sp in ctx.project.inputs}
    labels = {k: v for k, v in data.items() if k not in names}
    task = ctx.project.task(labels)
    user = user_metric(ctx.project.root, sec.metric, ctx.workdir / "budget-metric.log") if sec.metric else None

    def drop(outputs, reference) -> float:
        # a detector whose float model finds no box stops in evaluate (task.evaluate.no_reference)
        r = evaluate(task, outputs, reference, labels, user, sec.metric or "")
        if r["drop"] is not None:
            return r["drop"]
        # no figure to measure (a metric undefined on this set): cosine points
        return (1.0 - min(cosine(o, f) for o, f in zip(outputs, reference)
                          if np.shape(o) == np.shape(f))) * 100.0
    return drop, sec.metric or primary(task, has_labels(task, labels))


_ORT_METHOD = {"KL": "Entropy", "hist": "Percentile", "mse": "Entropy", "avg": "MinMax", "abs_max": "MinMax"}


def evaluation_set(ctx: PassContext, limit: int | None = None):
    data = ctx.project.load_data("evaluation")
    names = [sp.name for sp in ctx.project.inputs]
    feeds = {k: data[k][:limit] for k in names}
    labels = data.get("labels")
    if labels is not None and labels.ndim != 1:     # a CTC or segmentation [task]'s, not classes
        labels = None
    return feeds, (labels[:limit] if labels is not None else None)


@register
class OnnxQuantizePass(Pass):
    name = "quantize.onnx"
    version = 10                # 9: ships its fp32 sibling; 10: KL without the zero spike, floored at least squares
    consumes = frozenset({ONNX})
    produces = ONNX
    Config = QuantConfig

    def target_facts(self, ctx: PassContext):
        from ..contracts import host_arithmetic, host_can_time, onnx_scheme

        scheme, flag, _ = onnx_scheme(ctx.target, ctx.backend)
        timed = {} if host_can_time(ctx.target, ctx.backend)[0] else {"host_timed": False}
        # the arithmetic that judges the fit (the host's kernels unless they are unsound)
        return {"scheme": scheme.model_dump(mode="json"), "chosen_by_cpu_flag": flag, **timed,
                "arithmetic": host_arithmetic(ctx.target, ctx.backend)["kind"]}

    def _quantize(self, run: QuantRun, pre: Path, out: Path, algo: str, keep: list[str],
                  op_types: list[str] | None, overrides: dict | None = None) -> Path:
        from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, quantize_static

        from ..quant.degenerate import guard_histograms
        from ..quant.onnx_ptq import float_inputs, paddle_kl_entropy, reuse_calibration, scheme_options

        cfg: QuantConfig = self.config

        class Reader(CalibrationDataReader):
            def __init__(self):
                self._it = iter(run.batches)

            def get_next(self):
                return next(self._it, None)

        opts = scheme_options(run.scheme)       # the target runtime's INT8 scheme
        opts["extra_options"]["CalibMovingAverage"] = algo == "avg"
        opts["op_types_to_quantize"] = op_types      # None: onnxruntime's default (run: op_sets)
        if overrides:                                # tensor ranges a QAT fine-tune learned
            opts["extra_options"]["TensorQuantOverrides"] = overrides
        hist = paddle_kl_entropy(algo.lower()) if algo in ("KL", "mse") else contextlib.nullcontext()
        # calibration covers the tensors of the op types quantized: one set of ranges per op set
        with quiet_stdout(), hist, guard_histograms(run.degenerate), reuse_calibration(run.ranges, (tuple(op_types or ()), algo)):
            quantize_static(str(pre), str(out), Reader(), quant_format=QuantFormat.QDQ,
                            per_channel=cfg.per_channel_weights,
                            calibrate_method=getattr(CalibrationMethod, _ORT_METHOD[algo]),
                            nodes_to_exclude=list(keep) or None, **opts)
        float_inputs(pre, out, keep)   # a layer kept in float reads float activations, as in Paddle's PTQ
        return out

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        import onnx
        from ..quant.budget import onnx_rank
        from ..quant import degenerate
        from ..quant.onnx_ptq import op_types_to_quantize, pre_process
        from ..runner.predictors import onnx_predictor, predict_all

        from ..contracts import host_can_time, onnx_scheme
        from ..contracts import host_arithmetic

        cfg: QuantConfig = self.config
        scheme, flag, flags = onnx_scheme(ctx.target, ctx.backend)
        qrun = QuantRun(scheme, calibration_batches(ctx, cfg))
        pre = ctx.workdir / "quantize-pre.onnx"
        with quiet_stdout():
            pre_info = pre_process(inp.path / "model.onnx", pre)
        feeds, labels = evaluation_set(ctx)
        scratch = ctx.workdir / "quantize-onnx"
        scratch.mkdir(exist_ok=True)
        counter = iter(range(10_000))

        def layers() -> int:
            return sum(1 for n in onnx.load(str(pre)).graph.node if n.op_type in ONNX_QUANTIZABLE)

        # the INT8 arithmetic that judges every attempt: the target's, not the host CPU's (quant.arithmetic)
        arith = host_arithmetic(ctx.target, ctx.backend)

        t0 = time.monotonic()          # one max_seconds for every fit of this pass (_narrower fits twice)

        def fit(op_types):
            def quantize(algo: str, keep: list[str]) -> Path:
                ctx.log(f"onnxruntime quantize_static ({algo}, {len(keep)} layers in float)")
                return self._quantize(qrun, pre, scratch / f"q{next(counter)}.onnx", algo, keep, op_types)
            left = None if cfg.max_seconds is None else round(max(1.0, cfg.max_seconds - (time.monotonic() - t0)), 1)
            return quantize, search_and_fit(
                cfg.model_copy(update={"max_seconds": left}), ctx, quantize, predict=lambda m, n=None: runner_outputs(m, head(feeds, n), arith),
                reference=lambda: predict_all(onnx_predictor(pre), feeds), labels=labels,
                rank=lambda m: onnx_rank(pre, m, {k: v[:64] for k, v in feeds.items()}, scratch), layers=layers)

        op_types = op_types_to_quantize(pre)
        quantize, (model, meta, plain) = fit(op_types)
        if op_types is None and len(meta.keep_float) > len(cfg.keep_float):
            op_types, (quantize, (model, meta, plain)) = self._narrower(ctx, pre, fit, (quantize, (model, meta, plain)))
        plain_path = plain() if plain is not None else None
        if host_can_time(ctx.target, ctx.backend)[0]:     # only where the host runs the target's runtime
            model = self._fastest(ctx, inp.path / "model.onnx", (model, plain_path), meta,
                                  lambda keep: quantize(meta.quantization.algo, keep),
                                  (feeds, labels, lambda: predict_all(onnx_predictor(pre), feeds)))
        final = out_dir / "model.onnx"
        shutil.copy2(model, final)
        (out_dir / "float").mkdir()     # the fp32 build's artifact, byte for byte (base.FLOAT_FILE_ONNX)
        shutil.copy2(inp.path / "model.onnx", out_dir / FLOAT_FILE_ONNX)
        q = meta.quantization
        q.pre_process = pre_info
        degenerate.note(meta, qrun.degenerate, ctx.log)
        q.arithmetic = arith
        if meta.accuracy_budget is not None:
            meta.accuracy_budget.arithmetic = arith["kind"]
        q.op_types = op_types or "onnxruntime default (every op it supports)"
        q.scheme = Scheme(**scheme.model_dump(mode="json"), chosen_by_cpu_flag=flag, host_cpu_flags=flags)
        meta.file, meta.precision, meta.float_size_bytes = "model.onnx", "int8", inp.meta.float_size_bytes
        meta.float_file = FLOAT_FILE_ONNX
        meta.carry(inp.meta, "rewrites", "prune", "converter_fixes", "nms")
        if plain_path is not None:
            meta.accuracy_budget.cost = onnx_cost(plain_path, final, meta.int8_vs_fp32)
        return meta

    def _narrower(self, ctx: PassContext, pre: Path, fit, first):
        """The budget kept layers in float with every op onnxruntime supports quantized: fit it
        again with only the INT8-kernel ops (``INT8_KERNEL_OP_TYPES``) quantized, and keep the fit
        with the fewest float weight bytes (then the fewest float layers; a met budget first).
        A CNN's residual Adds, channel-shuffle Concats and pools carry per-tensor scales that no
        layer kept in float removes: zoo mobilenet_v2 needed 52 of 53 layers in float with them
        quantized (docs/conformance.md, 2026-12-03). Records ``accuracy_budget.op_sets``.
        Returns (the chosen op set, its fit)."""
        narrow = list(INT8_KERNEL_OP_TYPES)
        ctx.log(f"accuracy budget: fitting again with only {', '.join(narrow)} quantized")
        weights = weight_bytes(pre, ONNX_QUANTIZABLE)
        fits = []                          # (op set, (quantize, (model, meta, plain)), record)
        for ops, done in ((None, first), (narrow, fit(narrow))):
            meta = done[1][1]
            keep = meta.keep_float
            fits.append((ops, done, {"op_types": ops or "onnxruntime default (every op it supports)",
                                     "met": meta.accuracy_budget.met,
                                     "float_weight_bytes": sum(weights.get(k, 0) for k in keep),
                                     "float_layers": len(keep)}))
        # a met budget first, then the fewest float weight bytes, then layers; min keeps the default on a tie
        chosen = min(fits, key=lambda f: (not f[2]["met"], f[2]["float_weight_bytes"], f[2]["float_layers"]))
        for f in fits:
            f[2]["chosen"] = f is chosen
        quantize, result = chosen[1]
        result[1].accuracy_budget.op_sets = [f[2] for f in fits]
        return chosen[0], (quantize, result)

    def _fastest(self, ctx: PassContext, fp32: Path, models: tuple, meta: BuildMeta, requantize, data) -> Path:
        """Where the host runs the artifact: time fp32, the budget's INT8 and (when layers were
        kept in float) plain INT8 and the contiguous float sets that also meet the budget,
        interleaved in one process (spinning off); keep the fastest INT8 that meets the budget.
        Records ``int8_vs_fp32`` (raw samples, for compare) and ``accuracy_budget.speed``."""
        import os

        from ..quant.budget import alternatives_within, float_regions
        from ..quant.speed import NOTE, interleaved, p50
        from ..report.int8_procedure import decide_after_selection

        model, plain = models
        feeds, labels, reference = data
        ab = meta.accuracy_budget
        keep = list(meta.keep_float)
        options = {"int8": (model, keep, ab.final if ab else None)}
        order = [n.name for n in _onnx_nodes(fp32) if n.op_type in ONNX_QUANTIZABLE]
        if ab and ab.met and plain is not None:
            budget, reference = make_budget(self.config, ctx, labels), reference()
            # an INT8 model in substance: a speed alternative adds at most ALT_MAX_FLOAT_SHARE of
            # the weights in float (shufflenet_v2, 7-bit scheme: 30 -> 49 float layers was 14 %
            # faster on the host and 1.6 MB larger, 31 % of its weights)
            within, beyond = alternatives_within(keep, order, list(self.config.keep_float), weight_bytes(fp32, ONNX_QUANTIZABLE),
                                                 ALT_MAX_FLOAT_SHARE)
            for alt in beyond:
                ctx.log(f"accuracy budget: not timing {len(alt)} float layer(s): more than "
                        f"{ALT_MAX_FLOAT_SHARE:.0%} of the weights in float")
            for alt in within:
                ctx.log(f"accuracy budget: trying {len(alt)} float layer(s) in "
                        f"{float_regions(alt, order)} region(s)")
                cand = requantize(alt)
                m = budget.measure(runner_outputs(cand, feeds), reference, labels)
                ab.attempts.append(Attempt(algo=meta.quantization.algo, kept=len(alt), speed_alternative=True, **m))
                if budget.met(m):
                    options[f"int8 ({len(alt)} float)"] = (cand, alt, m)
        timed = {"fp32": fp32, **{k: v[0] for k, v in options.items()}}
        if plain is not None:
            timed["plain int8"] = plain
        threads = min(int(ctx.target.runtime.threads or 1), os.cpu_count() or 1)
        ctx.log(f"timing fp32 and INT8 on the host ({NOTE})")
        samples = interleaved(timed, feeds, threads=threads)
        best = min(options, key=lambda k: p50(samples[k]))
        model, keep, m = options[best]
        # picked as the fastest of several: fresh rounds decide (report/int8_procedure.py)
        retime = (lambda: interleaved({"fp32": fp32, "int8": model}, feeds, threads=threads)) if len(options) > 1 else None
        decided, fresh = decide_after_selection(samples, best, retime)
        if ab:
            ab.speed = [SpeedRow(variant=k, float_layers=len(timed_keep), regions=float_regions(timed_keep, order),
                                 p50_ms=round(p50(samples[k]), 4), chosen=k == best)
                        for k, (_, timed_keep, _) in options.items()]
            if plain is not None:
                ab.speed.append(SpeedRow(variant="plain int8", float_layers=len(self.config.keep_float),
                                         p50_ms=round(p50(samples["plain int8"]), 4), met=False))
            if best != "int8":
                ab.keep_float, ab.final, ab.final_drop = keep, m, m["accuracy_drop"]
                meta.keep_float = list(keep)
        meta.int8_vs_fp32 = {"fp32_samples_ms": [round(x, 5) for x in decided["fp32"]],
                                "int8_samples_ms": [round(x, 5) for x in decided["int8"]],
                                "plain_int8_p50_ms": round(p50(samples["plain int8"]), 4) if plain else None,
                                "fp32_p50_ms": round(p50(decided["fp32"]), 4), "int8_p50_ms": round(p50(decided["int8"]), 4),
                                "selected_from": len(options), "retimed": fresh,
                                "threads": threads, "note": NOTE}
        return model


ONNX_QUANTIZABLE = tuple(INT8_KERNEL_OP_TYPES)     # the layers the budget keeps in float or INT8
ALT_MAX_FLOAT_SHARE = 0.10       # _fastest: float weights a speed alternative may add (share of all)


def _onnx_nodes(path: Path):
    import onnx

    return onnx.load(str(path)).graph.node


def runner_outputs(model: Path, feeds: dict, arithmetic="host-cpu-kernels") -> list:
    """``model``'s outputs on the host with ``arithmetic`` (``contracts.host_arithmetic``)."""
    from ..quant.arithmetic import predictor
    from ..runner.predictors import predict_all

    return predict_all(predictor(model, arithmetic), feeds)
