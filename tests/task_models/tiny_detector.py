"""A tiny anchor-grid detector for the task tests: real digits (sklearn) placed in the cells
of a 4x4 grid on a 32x32 canvas; the model gives raw ``boxes [N, 16, 4]`` (the cell anchors
plus learned offsets) and ``scores [N, 2, 16]`` (class 0: digits 0-4, class 1: 5-9), which
the host post-processes (NMS) into detections."""
from __future__ import annotations

import numpy as np

GRID, CELL, CLASSES = 4, 8, 2
ANCHORS = np.array([[c * CELL, r * CELL, (c + 1) * CELL, (r + 1) * CELL]
                    for r in range(GRID) for c in range(GRID)], dtype="float32")


def scenes(n: int, seed: int = 0, per_image: int = 2):
    """Images [n, 1, 32, 32] and ground truth gt_boxes/gt_classes/gt_counts."""
    from sklearn.datasets import load_digits

    d = load_digits()
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 1, GRID * CELL, GRID * CELL), dtype="float32")
    boxes, classes, counts = [], [], []
    for i in range(n):
        k = int(rng.integers(1, per_image + 1))
        for cell in rng.choice(GRID * GRID, size=k, replace=False):
            j = int(rng.integers(len(d.images)))
            r, c = divmod(int(cell), GRID)
            x[i, 0, r * CELL:(r + 1) * CELL, c * CELL:(c + 1) * CELL] = d.images[j] / 16.0
            boxes.append(ANCHORS[cell])
            classes.append(int(d.target[j] >= 5))
        counts.append(k)
    return x, np.array(boxes, "float32").reshape(-1, 4), np.array(classes, "int64"), np.array(counts, "int64")


def build():
    import paddle
    import paddle.nn as nn
    import paddle.nn.functional as F

    class Detector(nn.Layer):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2D(1, 16, 3, padding=1)
            self.c2 = nn.Conv2D(16, 32, 3, padding=1)
            self.cls = nn.Conv2D(32, CLASSES, 1)
            self.box = nn.Conv2D(32, 4, 1)
            self.anchors = paddle.to_tensor(ANCHORS)

        def forward(self, x):
            f = F.max_pool2d(F.relu(self.c1(x)), 2)
            f = F.max_pool2d(F.relu(self.c2(f)), 4)                          # [N, 32, 4, 4]
            scores = F.sigmoid(paddle.reshape(self.cls(f), [-1, CLASSES, GRID * GRID]))
            off = paddle.transpose(paddle.reshape(self.box(f), [-1, 4, GRID * GRID]), [0, 2, 1])
            return self.anchors + off, scores

    paddle.seed(0)
    return Detector()


def _with(nms):
    """The detector with ``nms(boxes, scores) -> (rows, counts)`` in its graph (its weights
    under ``det.``)."""
    import paddle.nn as nn

    class WithNms(nn.Layer):
        def __init__(self):
            super().__init__()
            self.det = build()

        def forward(self, x):
            return nms(*self.det(x))

    return WithNms()


def build_with_nms():
    """The detector with ``paddle.vision.ops.matrix_nms`` in the graph: rows [M, 6] and
    per-image counts [N] (the legacy export and Paddle Lite take it; TOOLCHAIN 20)."""
    from paddle.vision.ops import matrix_nms

    def nms(boxes, scores):
        rows, counts, _ = matrix_nms(boxes, scores, score_threshold=0.05, post_threshold=0.05, nms_top_k=64,
                                     keep_top_k=32, background_label=-1, normalized=False,
                                     return_index=False, return_rois_num=True)
        return rows, counts

    return _with(nms)


def multiclass_nms(bboxes, scores, score_threshold=0.05, nms_top_k=64, keep_top_k=32, nms_threshold=0.5,
                   normalized=True, nms_eta=1.0, background_label=-1, rois_num=None):
    """PaddleDetection's ``ppdet.modeling.ops.multiclass_nms`` as its Paddle 3 releases write
    it: the ``multiclass_nms3`` C++ binding (rows [M, 6], index, per-image counts [N])."""
    import paddle

    out, _, num = paddle._C_ops.multiclass_nms3(bboxes, scores, rois_num, score_threshold, nms_top_k, keep_top_k,
                                                nms_threshold, normalized, nms_eta, background_label)
    return out, num


def build_with_nms3():
    """The detector with PaddleDetection's ``multiclass_nms3`` in the graph (its MultiClassNMS
    head): rows [M, 6] and per-image counts [N]."""
    return _with(multiclass_nms)


def targets(boxes, classes, counts):
    """Per image the [CLASSES, 16] cell targets of the ground truth."""
    t = np.zeros((len(counts), CLASSES, GRID * GRID), dtype="float32")
    start = 0
    for i, k in enumerate(counts):
        for b, c in zip(boxes[start:start + k], classes[start:start + k]):
            cell = int(b[1] // CELL) * GRID + int(b[0] // CELL)
            t[i, c, cell] = 1.0
        start += k
    return t


def train(seconds: float = 8.0, steps: int = 600):
    import time

    import paddle
    import paddle.nn.functional as F

    net = build()
    x, b, c, n = scenes(1024, seed=1)
    t = targets(b, c, n)
    opt = paddle.optimizer.Adam(learning_rate=3e-3, parameters=net.parameters())
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for _ in range(steps):
        idx = rng.integers(0, len(x), 64)
        boxes, scores = net(paddle.to_tensor(x[idx]))
        loss = F.binary_cross_entropy(scores, paddle.to_tensor(t[idx])) * 10 + \
            (boxes - paddle.to_tensor(ANCHORS)).abs().mean() * 0.1
        loss.backward()
        opt.step()
        opt.clear_grad()
        if time.perf_counter() - t0 > seconds:
            break
    net.eval()
    return net
