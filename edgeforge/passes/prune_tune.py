"""Structured pruning, then a distillation fine-tune (the child's side of ``prune``).

PaddleSlim 2.6.0's ``L1NormFilterPruner`` removes, from every convolution, the filters with
the smallest L1 norm, and with them the channels that read them (its collections keep
residual adds and depthwise groups consistent). One ratio applies to every convolution; it is
the smallest (bisection, 1/128 apart) that removes at least the FLOPs share asked for, counted
by PaddleSlim's ``dygraph_flops`` at the calibration data's shape. The pruned model then learns
the unpruned one's outputs on the calibration data (:func:`.distill.distill`: no labels) and
is saved as a legacy program, which the rest of the build converts, quantizes and verifies as
it would an export.

Paddle 3.3 renamed ``paddle.base.dygraph.base._to_static_mode_guard_`` (PaddleSlim's program
tracer calls it) to ``to_static_mode_guard``: :func:`slim_compat` points the old name at the new.

Runs in a child process (:func:`edgeforge.native.run_native`): the user's model code does.
"""
from __future__ import annotations

from pathlib import Path

MAX_RATIO = 0.9         # the most of each convolution's filters a search may remove


def prune_job(root: str, factory: str, weights: str | None, inputs: list[dict], data: str,
              settings: dict, out_dir: str, progress: str) -> dict:
    """``settings``: flops (the share to remove), steps, max_seconds, lr, batch_size.
    Returns ``{"ok": record}`` or ``{"error": [class, message, hint]}`` as the export job."""
    from ..errors import ConfigError, EdgeforgeError

    try:
        return {"ok": _prune(Path(root), factory, weights, inputs, Path(data), settings, Path(out_dir),
                             Path(progress))}
    except EdgeforgeError as exc:
        return {"error": ["config" if isinstance(exc, ConfigError) else "pass", exc.message, exc.hint]}


def slim_compat(paddle) -> None:
    base = paddle.base.dygraph.base
    if not hasattr(base, "_to_static_mode_guard_") and hasattr(base, "to_static_mode_guard"):
        base._to_static_mode_guard_ = base.to_static_mode_guard


def _prune(root: Path, factory: str, weights: str | None, inputs: list[dict], data: Path, settings: dict,
           out_dir: Path, progress: Path) -> dict:
    import numpy as np

    from ..errors import ConfigError
    from ..paddle_env import import_paddle
    from .distill import Plan, distill
    from .export import build_layer, jit_save
    from .quantize import quiet_stdout

    paddle = import_paddle()
    paddle.disable_static()
    paddle.seed(0)
    slim_compat(paddle)
    arrays = dict(np.load(data))
    names = [s["name"] for s in inputs]
    shapes = [[1, *arrays[k].shape[1:]] for k in names]
    if any(not np.issubdtype(arrays[k].dtype, np.floating) for k in names):
        raise ConfigError("--prune needs float model inputs (PaddleSlim traces the model with float32 data)",
                          hint="drop --prune for this model")
    teacher = build_layer(paddle, root, factory, weights)
    teacher.eval()
    target = float(settings["flops"])
    with quiet_stdout():
        from paddleslim.analysis import dygraph_flops
        from paddleslim.dygraph import L1NormFilterPruner

        def counts(model) -> tuple[float, int]:
            shape = shapes[0] if len(shapes) == 1 else shapes
            return float(dygraph_flops(model, shape)), int(sum(int(np.prod(p.shape)) for p in model.parameters()))

        def pruned(ratio: float):
            model = build_layer(paddle, root, factory, weights)
            model.eval()
            pruner = L1NormFilterPruner(model, shapes[0] if len(shapes) == 1 else shapes)
            convs = [p.name for p in model.parameters() if len(p.shape) == 4 and p.name not in pruner.skip_vars]
            pruner.prune_vars({name: ratio for name in convs}, axis=0)
            return model, len(convs)

        flops0, params0 = counts(teacher)
        if flops0 <= 0:
            raise ConfigError("--prune: PaddleSlim counts no FLOPs in this model (no convolution or matmul)",
                              hint="drop --prune for this model")
        top, n_convs = pruned(MAX_RATIO)
        reach = 1.0 - counts(top)[0] / flops0
        if n_convs == 0 or reach < target:
            raise ConfigError(f"--prune {target:g}: removing {MAX_RATIO:.0%} of every convolution's filters "
                              f"removes only {reach:.1%} of the FLOPs ({n_convs} convolution(s))",
                              hint=f"ask for at most --prune {max(reach - 0.01, 0.0):.2f}")
        lo, hi, tries = 0.0, MAX_RATIO, []
        while hi - lo > 1 / 128:
            mid = (lo + hi) / 2
            removed = 1.0 - counts(pruned(mid)[0])[0] / flops0
            tries.append([round(mid, 4), round(removed, 4)])
            lo, hi = (lo, mid) if removed >= target else (mid, hi)
        student, _ = pruned(hi)
        flops1, params1 = counts(student)
    arrays = {k: arrays[k] for k in names}
    # no mixup: a student that lost filters relearns the teacher on the data it will see
    # (measured on the digits test: 150 steps with mixup + shift left a 1.30-point drop, over its budget)
    run = distill(paddle, student, teacher, arrays, names, Plan(settings, progress, augment=False))
    specs = [paddle.static.InputSpec([None if d == -1 else d for d in s["shape"]], s["dtype"], s["name"])
             for s in inputs]
    with quiet_stdout():
        jit_save(paddle, student, str(out_dir / "model"), specs)
    for stray in out_dir.glob("model.pdiparams.info"):
        stray.unlink()
    return {"flops_asked": target, "filter_ratio": round(hi, 5), "convolutions": n_convs,
            "flops_before": flops0, "flops_after": flops1, "flops_removed": round(1.0 - flops1 / flops0, 4),
            "params_before": params0, "params_after": params1, "ratio_search": tries,
            "steps": len(run["losses"]), "seconds": round(run["seconds"], 2), "stopped_by": run["stopped_by"],
            "loss_curve": [round(x, 6) for x in run["losses"]],
            "pruner": "paddleslim L1NormFilterPruner (axis 0), one ratio for every convolution",
            "loss": "relative MSE of each output against the unpruned model (distillation, no labels)"}
