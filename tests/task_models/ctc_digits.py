"""A conv-only CTC recogniser of digit strings (sklearn digits side by side) for the task tests:
conv + pooling over height + a linear layer per column; 11 classes, blank = 10."""
from __future__ import annotations

import numpy as np

DIGITS = 4                 # per image
BLANK = 10


def strings(n: int, seed: int = 0):
    """``n`` images [n, 1, 8, 8 * DIGITS] of real digits side by side, and their labels
    [n, DIGITS + 1] padded with -1."""
    from sklearn.datasets import load_digits

    d = load_digits()
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(d.images), size=(n, DIGITS))
    x = np.concatenate([d.images[pick[:, i]] for i in range(DIGITS)], axis=2) / 16.0
    labels = np.full((n, DIGITS + 1), -1, dtype=np.int64)
    labels[:, :DIGITS] = d.target[pick]
    return x[:, None].astype("float32"), labels


def build():
    import paddle
    import paddle.nn as nn
    import paddle.nn.functional as F

    class Recogniser(nn.Layer):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2D(1, 16, 3, padding=1)
            self.c2 = nn.Conv2D(16, 32, 3, padding=1)
            self.fc = nn.Linear(32, BLANK + 1)

        def forward(self, x):
            f = F.max_pool2d(F.relu(self.c1(x)), 2)              # [N, 16, 4, W/2]
            f = F.relu(self.c2(f)).mean(axis=2)                  # pooled over height: [N, 32, T]
            return self.fc(paddle.transpose(f, [0, 2, 1]))       # [N, T, 11]

    paddle.seed(0)
    return Recogniser()


def train(seconds: float = 8.0, steps: int = 400):
    """The recogniser trained with CTC loss for at most ``seconds``; returns the layer."""
    import time

    import paddle
    import paddle.nn.functional as F

    net = build()
    x, labels = strings(2048, seed=1)
    opt = paddle.optimizer.Adam(learning_rate=3e-3, parameters=net.parameters())
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    for _ in range(steps):
        idx = rng.integers(0, len(x), 64)
        logits = net(paddle.to_tensor(x[idx]))                   # [B, T, C]
        logp = F.log_softmax(logits, axis=-1).transpose([1, 0, 2])
        t = logp.shape[0]
        loss = F.ctc_loss(logp, paddle.to_tensor(labels[idx, :DIGITS].astype("int32")),
                          paddle.full([64], t, "int64"), paddle.full([64], DIGITS, "int64"), blank=BLANK)
        loss.backward()
        opt.step()
        opt.clear_grad()
        if time.perf_counter() - t0 > seconds:
            break
    net.eval()
    return net
