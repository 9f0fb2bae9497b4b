"""A digits classifier ending the way PicoDet's head does (PaddleDetection's ``Integral``,
the distribution focal loss projection): each class's logit is the expectation of a softmax
over 8 bins, ``F.linear(p, project)`` with a rank-1 ``project`` weight [8]. Paddle's PTQ
collects that weight as a ``matmul_v2`` weight and its channel-wise code indexes
``shape[1]`` of it (TOOLCHAIN item 29): the layer must stay in float."""
from __future__ import annotations

import numpy as np

BINS = 8


def build():
    import paddle
    import paddle.nn as nn
    import paddle.nn.functional as F

    class DFLDigits(nn.Layer):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2D(1, 16, 3, padding=1)
            self.fc = nn.Linear(16 * 16, 10 * BINS)
            self.project = self.create_parameter([BINS], default_initializer=nn.initializer.Assign(
                np.linspace(-4.0, 4.0, BINS).astype("float32")))

        def forward(self, x):
            f = F.max_pool2d(F.relu(self.conv(x)), 2)
            p = F.softmax(paddle.reshape(self.fc(paddle.flatten(f, 1)), [-1, 10, BINS]), axis=-1)
            return F.linear(p, self.project)              # [N, 10]: a rank-1 weight

    paddle.seed(0)
    return DFLDigits()


def digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return ((d.images / 16.0 - 0.5) / 0.25).astype("float32")[:, None], d.target.astype("int64")


def train(steps: int = 150):
    import paddle
    import paddle.nn.functional as F

    net = build()
    x, y = digits()
    opt = paddle.optimizer.Adam(learning_rate=3e-3, parameters=net.parameters())
    rng = np.random.default_rng(0)
    for _ in range(steps):
        idx = rng.integers(0, len(x) - 160, 64)
        loss = F.cross_entropy(net(paddle.to_tensor(x[idx])), paddle.to_tensor(y[idx]))
        loss.backward()
        opt.step()
        opt.clear_grad()
    net.eval()
    return net
