"""Shared pieces for the benchmark scripts and the zoo conformance suite: real-image crops,
paddle.vision model projects, timing."""
from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

os.environ["FLAGS_enable_pir_api"] = "0"

import numpy as np

MEAN = np.array([0.485, 0.456, 0.406], dtype="float32").reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype="float32").reshape(3, 1, 1)


def sample_crops(n: int, seed: int, size: int = 224) -> np.ndarray:
    """``n`` random crops of sklearn's two sample photos, resized to ``size``, ImageNet-normalised NCHW."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    images = load_sample_images().images
    rng = np.random.default_rng(seed)
    out = np.empty((n, 3, size, size), dtype="float32")
    for i in range(n):
        img = images[i % len(images)]
        h, w, _ = img.shape
        side = int(rng.integers(min(h, w) // 3, min(h, w)))
        y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
        crop = Image.fromarray(img[y:y + side, x:x + side]).resize((size, size), Image.BILINEAR)
        arr = np.asarray(crop, dtype="float32").transpose(2, 0, 1) / 255.0
        out[i] = (arr - MEAN) / STD
    return out


# vision_project(init=...): how the random weights are drawn.
INITS = ("paddle", "calibrated")
BN_CALIBRATION_CROPS = 16     # real crops that set the BatchNorm statistics (init="calibrated")
BN_CALIBRATION_SEED = 3       # crop seed; calibration data uses 1, evaluation data 2


def _batch_norm_layers(layer) -> list:
    import paddle

    kinds = (paddle.nn.layer.norm._BatchNormBase, paddle.nn.BatchNorm)  # BatchNorm: densenet's
    return [m for m in layer.sublayers() if isinstance(m, kinds)]


def calibrated_init(layer, size: int, seed: int = 0) -> int:
    """Re-draw ``layer``'s weights so that its activations neither vanish nor blow up, as a
    trained network's do. Returns the number of BatchNorm layers it calibrated.

    With the architectures' own random init (``init="paddle"``) some nets give outputs that
    say nothing: mobilenet_v1 returns logits of about 4e-16, mobilenet_v2/v3 and the
    shufflenets 1e-4 to 1e-7 (BatchNorm with default statistics, mean 0 and variance 1, does
    not rescale the shrinking activations), and alexnet's uniform init makes its logits
    almost input-independent (they are its biases: the batch standard deviation is 2 % of
    the mean magnitude). A relative error or a cosine measured on such outputs means little.

    The scheme: every Conv2D and Linear weight is He-normal (std sqrt(2 / fan_in), fan_in =
    in_channels / groups x kernel area), every conv/linear bias zero; then each BatchNorm's
    running mean and variance are set to the batch statistics of ``BN_CALIBRATION_CROPS``
    real-image crops (seed ``BN_CALIBRATION_SEED``, disjoint from the calibration and
    evaluation crops) in one forward pass (BatchNorm layers in training mode with momentum 0,
    everything else in eval mode, so dropout stays off). Every layer then sees normalised
    activations; the logits of all 17 zoo architectures are O(1) and move with the input.
    """
    import math

    import paddle

    rng = np.random.default_rng(seed)
    for m in layer.sublayers(include_self=True):
        if isinstance(m, (paddle.nn.Conv2D, paddle.nn.Linear)):
            shape = list(m.weight.shape)
            # Conv2D weight [out, in/groups, kh, kw]; Linear weight [in, out]
            fan_in = shape[0] if isinstance(m, paddle.nn.Linear) else int(np.prod(shape[1:]))
            m.weight.set_value(rng.normal(0.0, math.sqrt(2.0 / fan_in), shape).astype("float32"))
            if m.bias is not None:
                m.bias.set_value(np.zeros(m.bias.shape, dtype="float32"))
    bns = _batch_norm_layers(layer)
    layer.eval()
    saved = [bn._momentum for bn in bns]
    for bn in bns:
        bn._momentum = 0.0          # running stat := this batch's statistic
        bn.train()
    with paddle.no_grad():
        layer(paddle.to_tensor(sample_crops(BN_CALIBRATION_CROPS, seed=BN_CALIBRATION_SEED, size=size)))
    for bn, mom in zip(bns, saved):
        bn._momentum = mom
    layer.eval()
    return len(bns)


def vision_project(root: Path, arch: str, calib: int = 32, evaluation: int = 64, size: int = 224,
                   seed: int = 0, init: str = "paddle") -> Path:
    """A model project for a paddle.vision architecture with random (seeded) weights.

    ``init="paddle"``: the architecture's own random init (``paddle.seed(seed)``).
    ``init="calibrated"``: He-normal weights and BatchNorm statistics measured on real crops
    (see ``calibrated_init``), for numeric checks that need outputs of a sane scale.
    """
    import paddle

    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, not {init!r}")
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / "model.py").write_text(textwrap.dedent(f"""
        import paddle
        from paddle.vision import models

        def build():
            return getattr(models, "{arch}")(pretrained=False)
        """))
    (root / "edgeforge.toml").write_text(textwrap.dedent(f"""
        name = "{arch}"
        [model]
        factory = "model:build"
        weights = "weights.pdparams"
        [[model.inputs]]
        name = "x"
        shape = [-1, 3, {size}, {size}]
        dtype = "float32"
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        """))
    paddle.seed(seed)
    from paddle.vision import models

    layer = getattr(models, arch)(pretrained=False)
    if init == "calibrated":
        calibrated_init(layer, size, seed=seed)
    paddle.save(layer.state_dict(), str(root / "weights.pdparams"))
    np.savez(root / "data/calib.npz", x=sample_crops(calib, seed=1, size=size))
    np.savez(root / "data/eval.npz", x=sample_crops(evaluation, seed=2, size=size))
    return root


def p50_ms(model_path: Path, feeds: dict, threads: int = 2, runs: int = 50, warmups: int = 10) -> float:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"])
    one = {k: v[:1] for k, v in feeds.items()}
    for _ in range(warmups):
        sess.run(None, one)
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, one)
        samples.append((time.perf_counter() - t) * 1000)
    return float(np.median(samples))


def onnx_outputs(model_path: Path, feeds: dict) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return np.concatenate([sess.run(None, {k: v[i:i + 16] for k, v in feeds.items()})[0]
                           for i in range(0, len(next(iter(feeds.values()))), 16)])


def agreement(out: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    top1 = float(np.mean(out.argmax(1) == ref.argmax(1)))
    o, r = out.reshape(len(out), -1).astype("float64"), ref.reshape(len(ref), -1).astype("float64")
    cos = float(np.mean((o * r).sum(1) / (np.linalg.norm(o, axis=1) * np.linalg.norm(r, axis=1))))
    return top1, cos
