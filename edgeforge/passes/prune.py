"""prune: structured filter pruning with a distillation fine-tune (``--prune SHARE``).

Runs right after ``export`` (so legalize, quantization, conversion and verify see the pruned
program as they would an export). The user's model is rebuilt from its factory in a child
process (:mod:`edgeforge.passes.prune_tune`), pruned with PaddleSlim's L1-norm filter pruner
until at least SHARE of its FLOPs are gone, and fine-tuned against its unpruned self on the
calibration data. The pruned float program is then judged on the evaluation set against the
unpruned one with the build's accuracy budget (labels only to judge, never to train): a miss
fails the build (exit 1), naming the figure. The record (FLOPs, parameters, size, host latency
of both float programs, the metric before and after, the loss curve) goes in the manifest's
``prune``. Verify then measures the artifact against the pruned float program.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from pydantic import Field

from ..errors import ConfigError, GateFailed
from .base import PADDLE_FLOAT, Artifact, Pass, PassConfig, PassContext, register
from .distill import run_tune_job
from .quantize import QuantConfig, evaluation_set, make_budget

_HOST_ROUNDS = 15             # interleaved rounds of the host latency comparison
_HOST_RUNS = 5                # timed runs per program per round


class PruneConfig(PassConfig):
    flops: float = Field(gt=0, le=0.95)   # the share of FLOPs to remove
    steps: int = Field(300, gt=0)
    max_seconds: float = Field(240.0, gt=0)
    lr: float = Field(1e-4, gt=0)
    batch_size: int = Field(32, gt=0)
    quant: QuantConfig                 # the budget and the data digests (cache key)


@register
class PrunePass(Pass):
    name = "prune"
    version = 1
    consumes = frozenset({PADDLE_FLOAT})
    produces = PADDLE_FLOAT
    Config = PruneConfig

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        from ..paddle_env import paddle_inference

        cfg: PruneConfig = self.config
        if getattr(ctx.project.spec.model, "factory", None) is None:
            raise ConfigError("--prune rebuilds the model from its code: [model] needs a factory",
                              hint="an exported inference program cannot be pruned here; drop --prune")
        ctx.log(f"removing {cfg.flops:.0%} of the FLOPs (L1-norm filters), then up to "
                f"{cfg.steps} steps or {cfg.max_seconds:g}s of distillation")
        record = self._tune(ctx, out_dir)
        feeds, labels = evaluation_set(ctx)
        budget = make_budget(cfg.quant, ctx, labels)
        reference = paddle_inference(inp.path, feeds)
        outs = paddle_inference(out_dir, feeds)
        measured = budget.measure(outs, reference, labels)
        k = ctx.project.spec.data.label_output
        if labels is not None and reference[k].ndim == 2:
            record["accuracy_before"] = round(float(np.mean(reference[k].argmax(1) == labels)), 6)
            record["accuracy_after"] = round(float(np.mean(outs[k].argmax(1) == labels)), 6)
        record.update(budget=budget.describe(), measured=measured, met=budget.met(measured),
                      figure=budget.figure(measured),
                      size_before=_size(inp.path), size_after=_size(out_dir))
        record["host"] = _host_latency(inp.path, out_dir, {n: a[:1] for n, a in feeds.items()})
        meta = inp.meta.updated(prune=record)
        ctx.log(f"{record['flops_removed']:.1%} of the FLOPs removed (filters x{1 - record['filter_ratio']:.3f}), "
                f"{budget.figure(measured)} against the unpruned model")
        if not record["met"]:
            raise GateFailed(f"pass prune: the pruned model misses the accuracy budget ({budget.describe()}): "
                             f"{budget.figure(measured)} after {record['steps']} fine-tune steps",
                             gates=["prune"],
                             hint="ask for a smaller --prune share, or more [prune] steps / max_seconds")
        return meta

    def _tune(self, ctx: PassContext, out_dir: Path) -> dict:
        from .prune_tune import prune_job

        cfg: PruneConfig = self.config
        settings = {"flops": cfg.flops, "steps": cfg.steps, "max_seconds": cfg.max_seconds, "lr": cfg.lr,
                    "batch_size": cfg.batch_size}
        return run_tune_job(ctx, self.name, "pruning and fine-tune", prune_job, settings, out_dir,
                            label="fine-tune", hint="drop --prune to build the model as it is")


def _size(model_dir: Path) -> int:
    return sum(p.stat().st_size for p in Path(model_dir).iterdir() if p.is_file())


def _host_latency(before: Path, after: Path, feed: dict) -> dict:
    """Both float programs under Paddle Inference on this host, batch 1, interleaved rounds:
    the share of time pruning saves here (a host figure, not the target's)."""
    import paddle.inference as pi

    def predictor(model_dir: Path):
        prog = next(Path(model_dir).glob("*.pdmodel"))
        config = pi.Config(str(prog), str(prog.with_suffix(".pdiparams")))
        config.disable_gpu()
        config.set_cpu_math_library_num_threads(1)
        config.disable_glog_info()
        pred = pi.create_predictor(config)
        for name in pred.get_input_names():
            pred.get_input_handle(name).copy_from_cpu(np.ascontiguousarray(feed[name]))
        return pred

    preds = {"before": predictor(before), "after": predictor(after)}
    samples: dict[str, list[float]] = {k: [] for k in preds}
    for p in preds.values():
        p.run()                         # warm-up
    for _ in range(_HOST_ROUNDS):
        for key, p in preds.items():
            for _ in range(_HOST_RUNS):
                t0 = time.perf_counter()
                p.run()
                samples[key].append((time.perf_counter() - t0) * 1e3)
    p50 = {k: float(np.median(v)) for k, v in samples.items()}
    return {"before_p50_ms": round(p50["before"], 4), "after_p50_ms": round(p50["after"], 4),
            "speedup": round(p50["before"] / p50["after"], 3) if p50["after"] > 0 else None,
            "threads": 1, "runtime": "Paddle Inference (float, this host)",
            "cpu_count": os.cpu_count()}
