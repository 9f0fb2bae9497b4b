"""Shared pieces for the benchmark scripts: real-image crops, a MobileNetV2 project, timing."""
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


def vision_project(root: Path, arch: str, calib: int = 32, evaluation: int = 64, size: int = 224,
                   seed: int = 0) -> Path:
    """A model project for a paddle.vision architecture with random (seeded) weights."""
    import paddle

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
