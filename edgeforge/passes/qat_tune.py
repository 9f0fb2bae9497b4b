"""Quantization-aware fine-tuning by distillation (the child's side of ``quantize.qat``).

PaddleSlim 2.6.0's dygraph ``QAT`` inserts fake-quant layers (channel-wise abs-max weights,
moving-average abs-max activations, ``onnx_format=True``: quantize_linear/dequantize_linear
pairs) into a copy of the user's model; the copy is fine-tuned to match the float model's
outputs (MSE) on the calibration data: no labels, no user training loop. Batch norm is folded
into its conv first (what the deployed conv computes is what gets fake-quantized), and weights
get 7 bits where the target's scheme has ``reduce_range``. Bounded by steps and wall time; each
step's loss is appended to a progress file the parent shows.

What is saved is the fine-tuned *float* program (legacy ``model.pdmodel`` + ``.pdiparams``, the
export pass's patches): the parent converts and quantizes it with the same quantizer and target
scheme as PTQ, so contracts hold as for PTQ. (paddle2onnx 1.3.1 drops the QDQ of MatMul layers
from a QAT program, and mis-scales 7-bit weights: the QAT program itself does not ship.)

Runs in a child process (:func:`edgeforge.native.run_native`): the user's model code does.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

CALIBRATION_PROBE = 256      # calibration inputs that set the starting ranges, at most
SIMULATED = 16               # calibration inputs whose simulated outputs the parent checks
QAT_CONFIG = {"weight_quantize_type": "channel_wise_abs_max",
              "activation_quantize_type": "moving_average_abs_max",
              "weight_bits": 8, "activation_bits": 8, "moving_rate": 0.9,
              "quantizable_layer_type": ["Conv2D", "Linear"], "onnx_format": True}


def qat_job(root: str, factory: str, weights: str | None, inputs: list[dict], data: str,
            settings: dict, out_dir: str, progress: str) -> dict:
    """The child's job. ``data``: an .npz of the calibration arrays (by input name);
    ``settings``: steps, max_seconds, lr, batch_size. Returns ``{"ok": record}`` or
    ``{"error": [class, message, hint]}`` as the export job does."""
    from ..errors import ConfigError, EdgeforgeError

    try:
        return {"ok": _qat(Path(root), factory, weights, inputs, Path(data), settings, Path(out_dir),
                           Path(progress))}
    except EdgeforgeError as exc:
        return {"error": ["config" if isinstance(exc, ConfigError) else "pass", exc.message, exc.hint]}


def _qat(root: Path, factory: str, weights: str | None, inputs: list[dict], data: Path, settings: dict,
         out_dir: Path, progress: Path) -> dict:
    import numpy as np

    from ..paddle_env import import_paddle
    from .distill import Plan, distill, outputs
    from .export import build_layer, jit_save
    from .quantize import quiet_stdout

    paddle = import_paddle()
    paddle.disable_static()
    paddle.seed(0)
    teacher = build_layer(paddle, root, factory, weights)
    student = build_layer(paddle, root, factory, weights)
    arrays = dict(np.load(data))
    names = [s["name"] for s in inputs]
    probe = [paddle.to_tensor(arrays[k][:8]) for k in names]
    try:
        fused = fuse_conv_bn(paddle, student, teacher, probe)
    except RuntimeError:            # a BatchNorm2D that is not its neighbour's: train unfused
        student, fused = build_layer(paddle, root, factory, weights), 0
    # the parameters the fake-quant wrappers train in place, by their names in the plain model
    tuned = dict(student.named_parameters())
    before = {k: v.numpy().copy() for k, v in tuned.items()}
    simulate = settings.get("simulate")
    if simulate:           # the ONNX backend: fake quant of the graph onnxruntime ships
        from .fake_quant import Grid, Simulator

        grid = Grid.from_scheme(simulate["activations"], bool(simulate["symmetric"]), bool(simulate["reduce_range"]))
        calib = [paddle.to_tensor(arrays[k][:CALIBRATION_PROBE]) for k in names]
        sim = Simulator(paddle, student, grid, calib)
        config = {"engine": "edgeforge fake quant (onnxruntime's QDQ graph)", "grid": asdict(grid),
                  "weights": "per-channel symmetric abs-max", "activations": "learned ranges (calibration min/max to start)",
                  "quantized": "every Conv2D/Linear input and output (a ReLU/ReLU6 that reads the output: its output)"}
        plan = Plan(dict(settings, extra_lr=settings.get("range_lr", 1e-3)), progress, extra=sim.parameters(),
                    train_mode=False)
        run = distill(paddle, student, teacher, arrays, names, plan)
        learned = {"kernels": sim.kernel_signatures(), "ranges": sim.learned_ranges()}
        # what the simulation computes on a few calibration inputs: the parent compares the
        # shipped graph's exact arithmetic with it (``simulation`` in the record)
        with paddle.no_grad():
            sim_out = outputs(student(*[paddle.to_tensor(arrays[k][:SIMULATED]) for k in names]))
        np.savez(Path(progress).parent / "simulated.npz",
                 **{f"input_{i}": arrays[k][:SIMULATED] for i, k in enumerate(names)},
                 **{f"output_{i}": o.numpy() for i, o in enumerate(sim_out)})
    else:                  # Lite: PaddleSlim's QAT (Paddle's PTQ writes the program Lite converts)
        with quiet_stdout():
            from paddleslim import QAT
        config = dict(QAT_CONFIG, weight_bits=int(settings.get("weight_bits", 8)))
        quanter = QAT(config=config)
        with quiet_stdout():
            quanter.quantize(student)
        run = distill(paddle, student, teacher, arrays, names, Plan(settings, progress))
        learned = {}
    losses, seconds, stopped_by = run["losses"], run["seconds"], run["stopped_by"]
    # the tuned float weights in the plain (batch-norm folded) model: the same quantizer as
    # PTQ's then writes the target's INT8 scheme, so the contracts and conversions are PTQ's
    plain = build_layer(paddle, root, factory, weights)
    if fused:
        fuse_conv_bn(paddle, plain, teacher, probe)
    plain.set_state_dict({k: v.numpy() for k, v in tuned.items()})
    plain.eval()
    moved = max((float(np.abs(v.numpy() - before[k]).max()) for k, v in tuned.items()), default=0.0)
    specs = [paddle.static.InputSpec([None if d == -1 else d for d in s["shape"]], s["dtype"], s["name"])
             for s in inputs]
    with quiet_stdout():
        jit_save(paddle, plain, str(out_dir / "model"), specs)
    for stray in out_dir.glob("model.pdiparams.info"):
        stray.unlink()
    return {**learned, "augment": run["augment"], "steps": len(losses), "fused_conv_bn": fused,
            "seconds": round(seconds, 2), "stopped_by": stopped_by, "weights_moved_max_abs": round(moved, 6),
            "loss_curve": [round(x, 6) for x in losses], "config": config,
            "loss": "relative MSE of each output against the float model (distillation, no labels)"}


def fuse_conv_bn(paddle, model, reference, probe: list) -> int:
    """Fold each BatchNorm2D that directly follows a Conv2D (consecutive children of one
    parent) into the conv, in place, before the fake quant goes in: the conv's output
    quantization then sees what the deployed (folded) conv computes. Paddle's own
    ``fuse_conv_bn`` fuses a copy and drops it (Paddle 3.3.1). Undone if the outputs move."""
    from paddle.quantization.imperative.fuse_utils import fuse_layers

    from .distill import outputs

    pairs = []
    for parent_name, parent in [("", model), *model.named_sublayers()]:
        kids = list(parent.named_children())
        for (a, la), (b, lb) in zip(kids, kids[1:]):
            if isinstance(la, paddle.nn.Conv2D) and isinstance(lb, paddle.nn.BatchNorm2D) \
                    and la._out_channels == lb._num_features:
                pre = f"{parent_name}." if parent_name else ""
                pairs.append([pre + a, pre + b])
    if not pairs:
        return 0
    model.eval()
    fuse_layers(model, pairs, inplace=True)
    with paddle.no_grad():
        got, ref = outputs(model(*probe)), outputs(reference(*probe))
    err = max(float(paddle.max(paddle.abs(g - r))) / (float(paddle.max(paddle.abs(r))) + 1e-8)
              for g, r in zip(got, ref))
    if err > 1e-3:
        raise RuntimeError(f"folding batch norm into conv moved the outputs (relative {err:.2e})")
    return len(pairs)

