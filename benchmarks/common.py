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


def _write_project(root: Path, arch: str, size: int, extra_args: str) -> None:
    """The model project files for ``models.<arch>(pretrained=False<extra_args>)`` at ``size``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / "model.py").write_text(textwrap.dedent(f"""
        import paddle
        from paddle.vision import models

        def build():
            return getattr(models, "{arch}")(pretrained=False{extra_args})
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
    _write_project(root, arch, size, "")
    paddle.seed(seed)
    from paddle.vision import models

    layer = getattr(models, arch)(pretrained=False)
    if init == "calibrated":
        calibrated_init(layer, size, seed=seed)
    paddle.save(layer.state_dict(), str(root / "weights.pdparams"))
    np.savez(root / "data/calib.npz", x=sample_crops(calib, seed=1, size=size))
    np.savez(root / "data/eval.npz", x=sample_crops(evaluation, seed=2, size=size))
    return root


# digits_project: paddle.vision architectures trained briefly on sklearn's digits.
DIGITS_RESOLUTION = {"alexnet": 224, "googlenet": 224, "inception_v3": 75}   # fixed-size heads / minimum
DIGITS_DEFAULT_RESOLUTION = 32
# (steps, batch, Adam learning rate): a short run that fits the zoo suite's time on 2 cores; the
# nets without BatchNorm (alexnet, vgg16, squeezenet) need a lower rate.
TRAIN_RECIPE = {"*": (100, 32, 1e-3), "resnet50": (60, 32, 1e-3), "resnext50_32x4d": (60, 32, 1e-3),
                "wide_resnet50_2": (40, 16, 1e-3), "inception_v3": (60, 32, 1e-3),
                "vgg16": (40, 16, 1e-4), "alexnet": (30, 16, 1e-4), "googlenet": (30, 16, 1e-3),
                "squeezenet1_0": (120, 32, 3e-4), "squeezenet1_1": (120, 32, 3e-4)}


def digits_resolution(arch: str) -> int:
    """The smallest input the architecture takes, or 32: alexnet's and googlenet's classifiers
    are sized for 224x224 (no adaptive pooling before them), inception_v3 needs 75x75."""
    return DIGITS_RESOLUTION.get(arch, DIGITS_DEFAULT_RESOLUTION)


def digits_images(size: int) -> tuple[np.ndarray, np.ndarray]:
    """sklearn's 1797 handwritten digits (real 8x8 scans), bilinear-upsampled to ``size``,
    grey replicated to 3 channels, normalised to about zero mean and unit spread; and labels."""
    import paddle
    from sklearn.datasets import load_digits

    d = load_digits()
    x = paddle.nn.functional.interpolate(paddle.to_tensor((d.images / 16.0).astype("float32")[:, None]),
                                         size=(size, size), mode="bilinear").numpy()
    return ((np.repeat(x, 3, 1) - 0.5) / 0.25).astype("float32"), d.target.astype("int64")


def train_on_digits(layer, x: np.ndarray, y: np.ndarray, steps: int, batch: int, lr: float, seed: int = 0) -> dict:
    """A short real training run: Adam on cross-entropy (every head of a multi-output net, e.g.
    googlenet's auxiliaries), then the BatchNorm running statistics are re-measured on 128
    training images (BatchNorm in training mode, momentum 0, everything else in eval mode).
    Returns the last loss and the seconds spent."""
    import paddle

    rng = np.random.default_rng(seed)
    opt = paddle.optimizer.Adam(learning_rate=lr, parameters=layer.parameters())
    t0 = time.perf_counter()
    layer.train()
    loss = None
    for _ in range(steps):
        b = rng.integers(0, len(x), batch)
        out = layer(paddle.to_tensor(x[b]))
        outs = out if isinstance(out, (list, tuple)) else [out]
        loss = sum(paddle.nn.functional.cross_entropy(o, paddle.to_tensor(y[b])) for o in outs)
        loss.backward()
        opt.step()
        opt.clear_grad()
    bns = _batch_norm_layers(layer)
    layer.eval()
    for bn in bns:
        bn._momentum = 0.0
        bn.train()
    with paddle.no_grad():
        layer(paddle.to_tensor(x[:128]))
    for bn in bns:
        bn._momentum = 0.9
    layer.eval()
    return {"loss": float(loss) if loss is not None else None, "seconds": time.perf_counter() - t0}


def digits_project(root: Path, arch: str, calib: int = 32, evaluation: int = 64, size: int | None = None,
                   seed: int = 0, train_steps: int | None = None, labels: bool = False) -> tuple[Path, dict]:
    """A model project for a paddle.vision architecture with a 10-class head, trained briefly
    on sklearn's digits (``TRAIN_RECIPE``), for checks that need a trained network: random
    weights make deep BatchNorm nets chaotic (any perturbation is amplified on its way to the
    logits), so an INT8-vs-float cosine measured on them says little.

    Data: 1797 digits, shuffled (seed); the last ``evaluation`` are the evaluation set (no
    labels in eval.npz, so builds judge INT8 by cosine; the labels go to data/labels.npy for
    accuracy figures), the ``calib`` before them the calibration set, the rest training data.
    Returns the project root and facts (resolution, training loss and time, float accuracy)."""
    import paddle
    from paddle.vision import models

    size = size or digits_resolution(arch)
    x, y = digits_images(size)
    order = np.random.default_rng(seed).permutation(len(x))
    ev, cal, train = order[-evaluation:], order[-evaluation - calib:-evaluation], order[:-evaluation - calib]
    _write_project(root, arch, size, ", num_classes=10")
    paddle.seed(seed)
    layer = getattr(models, arch)(pretrained=False, num_classes=10)
    steps, batch, lr = TRAIN_RECIPE.get(arch, TRAIN_RECIPE["*"])
    steps = train_steps or steps
    facts = train_on_digits(layer, x[train], y[train], steps=steps, batch=batch, lr=lr, seed=seed)
    with paddle.no_grad():
        out = layer(paddle.to_tensor(x[ev]))
    out = out[0] if isinstance(out, (list, tuple)) else out
    facts.update(size=size, steps=steps, batch=batch, lr=lr, float_accuracy=float(np.mean(out.numpy().argmax(1) == y[ev])))
    paddle.save(layer.state_dict(), str(root / "weights.pdparams"))
    np.savez(root / "data/calib.npz", x=x[cal])
    np.savez(root / "data/eval.npz", x=x[ev], **({"labels": y[ev].astype(np.int64)} if labels else {}))
    np.save(root / "data/labels.npy", y[ev])
    return root, facts


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
