"""Metrics of the tensor-shaped tasks: classification, segmentation, CTC, embedding, generic.

Every function takes numpy arrays and returns plain floats in [0, 1] (accuracies, IoU, CER)
or the error itself (cosine, max abs error). Detection is in :mod:`.detection`.
"""
from __future__ import annotations

import numpy as np


def _scores(x) -> np.ndarray:
    x = np.asarray(x)
    return x.reshape(len(x), -1)


def topk_accuracy(logits, labels, k: int = 1) -> float:
    """Share of samples whose label is among the ``k`` highest scores (ties: the first)."""
    s = _scores(logits)
    labels = np.asarray(labels).reshape(-1)
    k = min(k, s.shape[1])
    top = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return float(np.mean(np.any(top == labels[:, None], axis=1))) if len(s) else 0.0


def top1_agreement(logits, ref_logits) -> float:
    """Share of samples where the two models' top-1 classes agree."""
    a, b = _scores(logits).argmax(1), _scores(ref_logits).argmax(1)
    return float(np.mean(a == b)) if len(a) else 0.0


def confusion(pred, truth, classes: int, ignore: int | None = 255) -> np.ndarray:
    """The ``classes x classes`` confusion matrix (rows: truth) of two integer label maps."""
    p = np.asarray(pred).reshape(-1).astype(np.int64)
    t = np.asarray(truth).reshape(-1).astype(np.int64)
    keep = (t >= 0) & (t < classes) & (p >= 0) & (p < classes)
    if ignore is not None:
        keep &= t != ignore
    return np.bincount(t[keep] * classes + p[keep], minlength=classes * classes).reshape(classes, classes)


def segmentation_scores(pred, truth, classes: int, ignore: int | None = 255) -> dict:
    """mIoU over the classes present in the prediction or the truth, and pixel accuracy."""
    cm = confusion(pred, truth, classes, ignore).astype(np.float64)
    inter = np.diag(cm)
    union = cm.sum(0) + cm.sum(1) - inter
    present = union > 0
    miou = float(np.mean(inter[present] / union[present])) if present.any() else 1.0
    total = cm.sum()
    return {"miou": miou, "pixel_accuracy": float(inter.sum() / total) if total else 1.0}


def seg_argmax(logits) -> np.ndarray:
    """``[N, C, H, W]`` scores -> ``[N, H, W]`` classes (an integer map passes through)."""
    x = np.asarray(logits)
    if x.ndim == 4:
        return x.argmax(1)
    return x.astype(np.int64)


# ---------------------------------------------------------------- CTC

def ctc_greedy(logits, blank: int = 0, time_axis: int = 1) -> list[list[int]]:
    """Greedy CTC decoding of ``[N, T, C]`` scores (``time_axis=0``: ``[T, N, C]``): the
    best class per step, repeats collapsed, then ``blank`` dropped. The runner's: the code the
    device runs for ``[postprocess] op = "ctc_greedy"``."""
    from ..runner.postprocess import ctc_greedy as runner_ctc_greedy

    return runner_ctc_greedy(logits, blank, time_axis)


def unpad(labels) -> list[list[int]]:
    """``[N, L]`` labels padded with -1 (or any negative value) -> one list per sample."""
    return [[int(c) for c in row if c >= 0] for row in np.asarray(labels).reshape(len(labels), -1)]


def edit_distance(a, b) -> int:
    """Levenshtein distance (insertions, deletions, substitutions cost 1)."""
    a, b = list(a), list(b)
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def sequence_scores(pred: list[list[int]], truth: list[list[int]]) -> dict:
    """Sequence accuracy (exact matches) and character error rate (edits / truth length)."""
    if len(pred) != len(truth):
        raise ValueError(f"{len(pred)} decoded sequences for {len(truth)} labels")
    exact = sum(p == t for p, t in zip(pred, truth))
    edits = sum(edit_distance(p, t) for p, t in zip(pred, truth))
    chars = sum(len(t) for t in truth)
    return {"sequence_accuracy": exact / len(truth) if truth else 1.0,
            "cer": edits / chars if chars else float(edits > 0)}


# ---------------------------------------------------------------- embedding, generic

def _unit(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def recall_at_k(embeddings, labels, k: int = 1) -> float:
    """Share of queries with a same-label sample among their ``k`` nearest others (cosine)."""
    e = _unit(embeddings)
    labels = np.asarray(labels).reshape(-1)
    sim = e @ e.T
    np.fill_diagonal(sim, -np.inf)
    k = max(1, min(k, len(e) - 1))
    near = np.argsort(-sim, axis=1, kind="stable")[:, :k]
    return float(np.mean(np.any(labels[near] == labels[:, None], axis=1))) if len(e) > 1 else 0.0


def cosine(out, ref) -> float:
    """Mean per-sample cosine of two outputs (1.0 for two all-zero samples)."""
    a = np.asarray(out, dtype=np.float64).reshape(len(out), -1)
    b = np.asarray(ref, dtype=np.float64).reshape(len(ref), -1)
    if a.shape != b.shape:
        raise ValueError(f"output shape {a.shape} differs from reference {b.shape}")
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    num = np.sum(a * b, axis=1)
    same = np.all(a == b, axis=1)
    cos = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.where(same, 1.0, 0.0))
    return float(np.mean(cos)) if len(cos) else 1.0


def max_abs_error(out, ref) -> float:
    d = np.abs(np.asarray(out, dtype=np.float64) - np.asarray(ref, dtype=np.float64))
    return float(d.max()) if d.size else 0.0
