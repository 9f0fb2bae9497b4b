"""quantize.qat: quantization-aware fine-tuning when post-training INT8 keeps layers in float.

Runs after ``quantize.onnx`` (or ``quantize.ptq`` on the Lite backend). Entered when ``--qat`` asks for it, or (``[quantization.qat]
auto = true``) when the PTQ budget search kept layers in float beyond the user's. The user's
model is fine-tuned with fake quantization against its float self by distillation on the
calibration data (:mod:`edgeforge.passes.qat_tune`, in a child process: the user's code runs
there), quantized by the PTQ pass's own quantizer and target scheme (onnxruntime's on the
tuned ONNX, Paddle's PTQ on the tuned program for Lite), and judged on the evaluation set exactly as
the PTQ budget judges (labels only to judge). Shipped when every layer is INT8 and the budget
holds; otherwise the PTQ result goes on, with its float layers, and the manifest says why.
The artifact then goes through verify (accuracy, the target's runtime contract) like PTQ's.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Optional

from pydantic import Field

from ..build_meta import Qat
from ..errors import ConfigError, PassError
from ..native import run_native
from ..quant.budget import better
from ..quant.input_rounding import advice, input_rounding
from .distill import run_tune_job
from .base import ONNX, PADDLE_FLOAT, PADDLE_INT8, Artifact, Pass, PassConfig, PassContext, register
from .quantize import ONNX_QUANTIZABLE, QuantConfig, evaluation_set, make_budget, runner_outputs



# Adam's learning rate for the weights by engine: the ONNX simulation carries the shipped
# graph's noise and needs small steps (measured on mobilenet_v2: 1e-4 ends at cosine 0.96,
# 1e-5 at 0.986); PaddleSlim's QAT for Lite is tuned at 1e-4
DEFAULT_LR = {"onnx": 1e-5, "lite": 1e-4}


class QatConfig(PassConfig):
    force: bool = False                # --qat: run even when PTQ kept every layer INT8
    auto: bool = False                 # [quantization.qat] auto: run when PTQ kept layers in float
    steps: int = Field(300, gt=0)
    max_seconds: float = Field(240.0, gt=0)
    lr: Optional[float] = Field(None, gt=0)     # None: DEFAULT_LR of the engine
    batch_size: int = Field(32, gt=0)
    opset: int = 13
    backend: str = "onnx"              # lite: after quantize.ptq, Paddle's PTQ on the tuned program
    quant: QuantConfig                 # the budget and the data digests (cache key)


def float_layers(model: Path) -> list[str]:
    """Quantizable nodes of a QDQ ONNX model that read a float weight (no DequantizeLinear)."""
    import onnx

    graph = onnx.load(str(model)).graph
    dq = {n.output[0] for n in graph.node if n.op_type == "DequantizeLinear"}
    return [n.name or n.output[0] for n in graph.node
            if n.op_type in ONNX_QUANTIZABLE and len(n.input) > 1 and n.input[1] not in dq]


@register
class QatPass(Pass):
    name = "quantize.qat"
    version = 1
    consumes = frozenset({ONNX, PADDLE_INT8})      # after quantize.onnx, or quantize.ptq (Lite)
    produces = ONNX
    needs = frozenset({PADDLE_FLOAT})      # the float model: the reference its figures are against
    Config = QatConfig

    def __init__(self, config=None):
        super().__init__(config)
        if self.config.backend == "lite":
            self.produces = PADDLE_INT8

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        cfg: QatConfig = self.config
        user_float = set(cfg.quant.keep_float)
        ptq_float = [k for k in inp.meta.keep_float if k not in user_float]
        meta = inp.meta.updated()
        lite = inp.kind == PADDLE_INT8
        _copy_all(inp.path, out_dir)
        if not cfg.force and not (cfg.auto and ptq_float):
            why = "PTQ kept every layer INT8" if not ptq_float else "not asked for (--qat, [quantization.qat] auto)"
            meta.qat = Qat(entered=False, shipped="ptq", why=why)
            return meta
        why_in = "--qat" if cfg.force else f"PTQ kept {len(ptq_float)} layer(s) in float"
        if getattr(ctx.project.spec.model, "factory", None) is None:    # an exported inference program
            if cfg.force:
                raise ConfigError("--qat fine-tunes the model's own code: [model] needs a factory",
                                  hint="an exported inference program has no trainable layers here; drop --qat")
            meta.qat = Qat(entered=False, shipped="ptq", why="no [model] factory to fine-tune")
            return meta
        ctx.log(f"QAT ({why_in}): up to {cfg.steps} steps or {cfg.max_seconds:g}s of distillation")
        record = self._train(ctx, weight_bits=7 if not lite and _scheme(ctx).reduce_range else 8)
        feeds, labels = evaluation_set(ctx)
        budget = make_budget(cfg.quant, ctx, labels)
        reference = _paddle_reference(ctx, feeds)
        if lite:      # Paddle's PTQ on the tuned program; judged as quantize.ptq judges (fake-quant program)
            from ..paddle_env import paddle_inference

            qat_model, algo = self._quantize_paddle(ctx)
            left = []
            m_qat = budget.measure(paddle_inference(qat_model, feeds), reference, labels)
            m_ptq = budget.measure(paddle_inference(inp.path, feeds), reference, labels)
            record.update(calibration=algo, arithmetic="paddle fake-quant program (simulated on the host)",
                          input_rounding=None)
        else:
            from ..contracts import host_arithmetic

            qat_model, algo = self._quantize(ctx, self._convert(ctx), record)
            record["simulation"] = simulation_check(ctx.workdir / "qat" / "simulated.npz", qat_model)
            left = [k for k in float_layers(qat_model) if k not in user_float]
            arith = host_arithmetic(ctx.target, ctx.backend)     # the target's INT8 arithmetic, as PTQ's budget
            m_qat = budget.measure(runner_outputs(qat_model, feeds, arith), reference, labels)
            m_ptq = budget.measure(runner_outputs(inp.path / "model.onnx", feeds, arith), reference, labels)
            record.update(calibration=algo, arithmetic=arith["kind"])
            record["input_rounding"] = input_rounding(qat_model, feeds, reference, labels,
                                                      lambda f: _paddle_reference(ctx, f), budget)
        record.update(entered=True, entered_because=why_in, budget=budget.describe(), measured=m_qat,
                      float_layers=len(left), ptq={"float_layers": len(ptq_float) + len(user_float),
                                                   "measured": m_ptq})
        shipped, why = decide(budget, m_qat, m_ptq, left, ptq_float, record.get("input_rounding"))
        record.update(shipped=shipped, why=why)
        if lite:
            record["host"] = None
        else:
            self._time(ctx, inp.path / "model.onnx", qat_model, record)
        ctx.log(f"QAT: shipping {record['shipped'].upper()}: {record['why']}")
        if record["shipped"] == "qat":
            if lite:
                shutil.rmtree(out_dir / "plain_int8", ignore_errors=True)    # PTQ's, for its float cost
                for f in qat_model.iterdir():
                    shutil.copy2(f, out_dir / f.name)
            else:
                shutil.copy2(qat_model, out_dir / "model.onnx")
            meta.keep_float = []
            meta.int8_vs_fp32 = None             # timed on the PTQ model; QAT's is in qat.host
            ab = meta.accuracy_budget
            if ab is not None:
                ab.final, ab.final_drop, ab.keep_float, ab.met, ab.shipped = m_qat, m_qat["accuracy_drop"], [], True, "qat"
        meta.qat = record
        return meta

    def _train(self, ctx: PassContext, weight_bits: int) -> dict:
        from .qat_tune import qat_job

        cfg: QatConfig = self.config
        lr = cfg.lr or DEFAULT_LR["lite" if cfg.backend == "lite" else "onnx"]
        settings = {"steps": cfg.steps, "max_seconds": cfg.max_seconds, "lr": lr, "batch_size": cfg.batch_size,
                    "weight_bits": weight_bits}
        if cfg.backend != "lite":      # fake quant of the graph onnxruntime ships, in the target's scheme
            scheme = _scheme(ctx)
            settings["simulate"] = {"activations": scheme.activations, "symmetric": scheme.symmetric_activations,
                                    "reduce_range": scheme.reduce_range}
        return run_tune_job(ctx, self.name, "QAT fine-tune", qat_job, settings, ctx.workdir / "qat" / "program",
                            label="QAT", hint="--no-qat ships the PTQ result")

    def _convert(self, ctx: PassContext) -> Path:
        from .onnx import paddle2onnx_convert, check_converted

        prog = ctx.workdir / "qat" / "program"
        out = ctx.workdir / "qat" / "float.onnx"
        run_native(self.name, "paddle2onnx (QAT-tuned program)", paddle2onnx_convert, (str(prog), str(out), self.config.opset),
                   ctx.workdir / "qat" / "paddle2onnx.log")
        if not out.is_file():
            raise PassError(self.name, "paddle2onnx wrote no model.onnx for the QAT-tuned program")
        check_converted(self.name, out)
        return out

    def _quantize(self, ctx: PassContext, fp32: Path, record: dict) -> tuple[Path, str]:
        """The tuned float model through quantize.onnx's own quantizer and target scheme.
        Quantized: what the fine-tune fake-quantized, the inputs and outputs of Conv,
        ConvTranspose, MatMul and Gemm (a Relu or Clip after one folds into its output's
        range), not the residual Adds, Concats and pools it never trained with a range on.
        Ranges: the learned ones (``record``'s, mapped onto the graph by
        :mod:`edgeforge.quant.qat_ranges`); the rest by moving-average min/max calibration,
        unless --calibration pinned another."""
        from ..quant.onnx_ptq import INT8_KERNEL_OP_TYPES, pre_process
        from ..quant.qat_ranges import FOLDED_ACTIVATIONS, onnx_overrides
        from .quantize import OnnxQuantizePass, QuantRun, calibration_batches, quiet_stdout

        quant = self.config.quant
        algo = quant.algo if quant.algo_fixed else "avg"
        q, qrun = OnnxQuantizePass(quant), QuantRun(_scheme(ctx), calibration_batches(ctx, quant))
        pre = ctx.workdir / "qat" / "pre.onnx"
        with quiet_stdout():
            pre_process(fp32, pre)
        overrides, mapped = onnx_overrides(pre, record.get("kernels") or [], record.get("ranges") or [])
        record["learned_ranges"] = mapped
        ctx.log(f"QAT: onnxruntime quantize_static ({algo}) of the tuned model, "
                f"{mapped['mapped']} learned range(s)")
        out = q._quantize(qrun, pre, ctx.workdir / "qat" / "model.onnx", algo, list(quant.keep_float),
                          list(INT8_KERNEL_OP_TYPES) + list(FOLDED_ACTIVATIONS), overrides)
        if qrun.degenerate:
            record["degenerate_ranges"] = dict(qrun.degenerate)
        return out, algo

    def _quantize_paddle(self, ctx: PassContext) -> tuple[Path, str]:
        """The tuned program through quantize.ptq's own PostTrainingQuantization."""
        from .quantize import PaddlePTQPass, calibration_batches

        quant = self.config.quant
        algo = quant.algo if quant.algo_fixed else "avg"
        q = PaddlePTQPass(quant)
        out = ctx.workdir / "qat" / "ptq"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        ctx.log(f"QAT: Paddle PTQ ({algo}) of the tuned program")
        return q._ptq(ctx.workdir / "qat" / "program", out, calibration_batches(ctx, quant), algo,
                      list(quant.keep_float), ({}, [])), algo

    def _time(self, ctx: PassContext, ptq: Path, qat: Path, record: dict) -> None:
        """Where the host runs the target's runtime: PTQ and QAT timed interleaved."""
        import os

        from ..contracts import host_can_time
        from ..quant.speed import NOTE, interleaved, p50

        if not host_can_time(ctx.target, ctx.backend)[0]:
            record["host"] = None
            return
        feeds, _ = evaluation_set(ctx, limit=1)
        threads = min(int(ctx.target.runtime.threads or 1), os.cpu_count() or 1)
        samples = interleaved({"ptq": ptq, "qat": qat}, feeds, threads=threads)
        record["host"] = {"ptq_p50_ms": round(p50(samples["ptq"]), 4), "qat_p50_ms": round(p50(samples["qat"]), 4),
                          "ptq_samples_ms": [round(x, 5) for x in samples["ptq"]],
                          "qat_samples_ms": [round(x, 5) for x in samples["qat"]], "threads": threads, "note": NOTE}


def decide(budget, m_qat: dict, m_ptq: dict, left: list[str], ptq_float: list[str],
           input_probe: dict | None = None) -> tuple[str, str]:
    """Which result ships, and why: QAT when every layer is INT8 and the budget holds, else PTQ.
    A miss says when the input's own rounding took much of the budget; a QAT asked for on a model
    whose PTQ kept every layer INT8 too says when PTQ measured better (``--no-qat`` ships it)."""
    if left:
        return "ptq", f"QAT left {len(left)} layer(s) in float ({', '.join(left[:3])})"
    if not budget.met(m_qat):
        return "ptq", f"QAT missed the budget ({budget.describe()}): {budget.figure(m_qat)}{advice(input_probe)}"
    why = f"every layer INT8 within the budget: {budget.figure(m_qat)}"
    if not ptq_float and better(budget, m_ptq, m_qat):
        why += f"; PTQ kept every layer INT8 too and measured better ({budget.figure(m_ptq)}): --no-qat ships it"
    return "qat", why


def simulation_check(simulated: Path, model: Path) -> dict | None:
    """How closely the fine-tune's fake quant computed what ships: the shipped graph's exact
    QDQ arithmetic against the simulated outputs, on the same calibration inputs."""
    import numpy as np

    from ..quant.arithmetic import EXACT_QDQ, predictor
    from ..runner.predictors import predict_all
    from ..task.metrics import cosine

    if not simulated.is_file():
        return None
    with np.load(simulated) as z:
        run = predictor(model, EXACT_QDQ)
        feeds = {name: z[f"input_{i}"] for i, name in enumerate(run.input_names)}
        sim = [z[f"output_{i}"] for i in range(sum(1 for f in z.files if f.startswith("output_")))]
    got = predict_all(run, feeds)
    worst = min(cosine(g, s) for g, s in zip(got, sim))
    rel = max(float(np.abs(g - s).max() / (np.abs(s).max() + 1e-12)) for g, s in zip(got, sim))
    return {"inputs": int(len(next(iter(feeds.values())))), "cosine": round(worst, 6), "rel_max_abs_error": round(rel, 6),
            "arithmetic": EXACT_QDQ}


def _copy_all(src: Path, dst: Path) -> None:
    for p in src.iterdir():
        (shutil.copytree if p.is_dir() else shutil.copy2)(p, dst / p.name)


def _scheme(ctx: PassContext):
    from ..contracts import onnx_scheme

    return onnx_scheme(ctx.target, ctx.backend)[0]


def _paddle_reference(ctx: PassContext, feeds: dict) -> list:
    from ..paddle_env import paddle_inference

    return paddle_inference(ctx.needed(PADDLE_FLOAT, QatPass.name).path, feeds)


def qat_config(project_qat, quant: QuantConfig, force: bool, opset: int,
               overrides: Optional[dict] = None, backend: str = "onnx") -> QatConfig:
    """The pass config from the project's ``[quantization.qat]`` and the build's flags."""
    base = project_qat.model_dump() if project_qat is not None else {}
    base.update(overrides or {})
    return QatConfig(force=force, quant=quant, opset=opset, backend=backend, **base)

