"""``[preprocess] fold = true``: the pre-processing's array steps (cast, channel order, scale,
mean/std, layout) go into the graph, so the artifact takes the camera's bytes: uint8 NHWC
``[-1, H, W, 3]``, both backends.

The factory's layer is wrapped at export (:func:`.fold_layer.wrap`, in the export child): the program, and
so the ONNX model and the Paddle Lite ``.nb``, begin with the cast. The project's input for
``[preprocess] input`` becomes that uint8 tensor (``Project.inputs``; ``Project.fold`` is what
is folded, checked when the project loads): the calibration and
evaluation data hold it, as decoded and resized images (uint8 ``[N, H, W, 3]``, RGB). Verify
checks the folded artifact against the unfolded model: the factory's own layer, run in a child
on the same images through the declared pipeline's array steps (the runner's ``run_pipeline``,
the code the device would otherwise run) (:func:`unfolded_outputs`).

Refused (exit 2): an exported ``[model] inference`` program (there is no layer to wrap), a
model of more than one input, a factory input that is not ``[-1, 3, H, W]`` (NCHW) or ``[-1, H, W, 3]`` (NHWC) float32 of the
pre-processing's size, and ``--qat`` (it trains the unwrapped layer; ``[quantization.qat]
auto`` is skipped for a folded build).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


def unfold(x: np.ndarray, fold: dict) -> np.ndarray:
    """uint8 ``[N, H, W, 3]`` images -> the unfolded model's float input, through the runner's
    ``run_pipeline`` (its array steps)."""
    from PIL import Image

    from ..runner.pipeline import run_pipeline

    return np.stack([run_pipeline(Image.fromarray(np.ascontiguousarray(img), "RGB"), fold["steps"]) for img in x])


def _run_unfolded(root: str, factory: str, weights, feeds: dict, names: list) -> list:
    """In the child: the factory's layer (dygraph, no grad) on ``feeds``, in chunks of 64."""
    from ..paddle_env import import_paddle
    from .export import build_layer

    paddle = import_paddle()
    paddle.disable_static()
    layer = build_layer(paddle, Path(root), factory, weights)
    n = len(feeds[names[0]])
    chunks = []
    with paddle.no_grad():
        for i in range(0, n, 64):
            out = layer(*[paddle.to_tensor(feeds[k][i:i + 64]) for k in names])
            out = out if isinstance(out, (list, tuple)) else [out]
            chunks.append([np.asarray(o.numpy()) for o in out])
    return [np.concatenate([c[j] for c in chunks]) for j in range(len(chunks[0]))]


def unfolded_outputs(project, fold: dict, feeds: dict, log: Path) -> list:
    """The unfolded model's outputs on ``feeds`` (the folded input's uint8 images unfolded)."""
    from ..native import run_native

    names = [s.name for s in project.spec.model.inputs]
    plain = {k: (unfold(v, fold) if k == fold["input"] else v) for k, v in feeds.items() if k in names}
    return run_native("verify", f"the unfolded model (factory '{project.spec.model.factory}')", _run_unfolded,
                      (str(project.root), project.spec.model.factory,
                       str(project.weights) if project.weights else None, plain, names), log,
                      hint=f"see {log}", timeout=600)


def compare(outs: list, unfolded: list) -> dict:
    """Figures of ``outs`` against the unfolded model's: worst relative max error, min cosine."""
    from ..runner.metrics import drift_metrics

    m = drift_metrics(outs, unfolded)
    per = m["outputs"]
    return {"rel_max_abs_error": max((o["rel_max_abs_error"] or 0.0) for o in per),
            "max_abs_error": max((o["max_abs_error"] or 0.0) for o in per),
            "cosine": min((o["cosine"] for o in per if o["cosine"] is not None), default=1.0)}
