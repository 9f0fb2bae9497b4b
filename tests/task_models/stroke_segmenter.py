"""A tiny stroke segmenter for the init --task tests: real digits (sklearn, 8x8 upscaled 4x to 32x32)
and their stroke masks (class 1 where the pixel is at least half of full scale, else 0); the
model gives logits [N, 2, 32, 32]."""
from __future__ import annotations

import numpy as np


def scenes(n: int, seed: int = 0):
    """Images [n, 32, 32] in [0, 1] and masks [n, 32, 32] (0 background, 1 stroke)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    rng = np.random.default_rng(seed)
    img = np.kron(d.images[rng.integers(0, len(d.images), n)] / 16.0, np.ones((1, 4, 4)))
    return img.astype("float32"), (img >= 0.5).astype("int64")


def build():
    import paddle
    import paddle.nn as nn

    paddle.seed(0)
    return nn.Sequential(nn.Conv2D(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2D(8, 2, 3, padding=1))


def train(seconds: float = 120.0, steps: int = 200):
    import time

    import paddle
    import paddle.nn.functional as F

    net = build()
    x, m = scenes(512, seed=1)
    opt = paddle.optimizer.Adam(learning_rate=1e-2, parameters=net.parameters())
    deadline = time.perf_counter() + seconds
    for idx in np.random.default_rng(0).integers(0, len(x), (steps, 32)):
        if time.perf_counter() > deadline:
            break
        logits = paddle.transpose(net(paddle.to_tensor(x[idx][:, None])), [0, 2, 3, 1])
        F.cross_entropy(logits, paddle.to_tensor(m[idx][..., None])).backward()
        opt.step()
        opt.clear_grad()
    net.eval()
    return net
