"""A tiny segmenter of real digits (sklearn's 8x8 digits, upscaled and placed on a 32x32
canvas): per pixel, background (0), a digit below five (1) or five and above (2). Conv only,
trained for seconds on the CPU. Used by the [task] kind = "segmentation" tests."""
from __future__ import annotations

import numpy as np


def scenes(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Images [n, 1, 32, 32] (float32) and masks [n, 32, 32] (int64)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 1, 32, 32), np.float32)
    y = np.zeros((n, 32, 32), np.int64)
    for i in range(n):
        k = int(rng.integers(0, len(d.images)))
        digit = np.kron(d.images[k] / 16.0, np.ones((2, 2), np.float32))       # 16x16
        top, left = (int(v) for v in rng.integers(0, 17, 2))
        x[i, 0, top:top + 16, left:left + 16] = digit
        y[i, top:top + 16, left:left + 16] = np.where(digit > 0.25, 1 + (d.target[k] >= 5), 0)
    return x, y


def build():
    import paddle.nn as nn

    return nn.Sequential(nn.Conv2D(1, 16, 5, padding=2), nn.ReLU(), nn.Conv2D(16, 16, 5, padding=2), nn.ReLU(),
                         nn.Conv2D(16, 3, 1))


def train(seconds: float = 8.0, steps: int = 400, min_steps: int = 60):
    """At least ``min_steps`` (a loaded machine still gets a model), at most ``steps``."""
    import time

    import paddle
    import paddle.nn.functional as F

    paddle.seed(0)
    net = build()
    x, y = scenes(512, seed=1)
    opt = paddle.optimizer.Adam(learning_rate=3e-3, parameters=net.parameters())
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for step in range(steps):
        idx = rng.integers(0, len(x), 32)
        logits = net(paddle.to_tensor(x[idx]))
        loss = F.cross_entropy(paddle.transpose(logits, [0, 2, 3, 1]), paddle.to_tensor(y[idx][..., None]))
        loss.backward()
        opt.step()
        opt.clear_grad()
        if step >= min_steps and time.perf_counter() - t0 > seconds:
            break
    net.eval()
    return net
