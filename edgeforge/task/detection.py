"""Detection metrics: COCO-style mAP, artifact-vs-float matching, and a host NMS.

Detections come as Paddle's ``multiclass_nms3`` / ``matrix_nms`` give them: rows ``[M, 6]``
(class, score, x1, y1, x2, y2) for the whole batch plus per-image counts ``[N]``. Ground truth
is ``gt_boxes [K, 4]``, ``gt_classes [K]`` and ``gt_counts [N]``.

AP is COCO's: per class, the detections of all images by falling score, each matched greedily
to the unmatched ground-truth box of its image with the highest IoU at or above the
threshold; the precision envelope sampled at 101 recall points. mAP averages the classes that
have ground truth; mAP@0.5:0.95 averages IoU thresholds 0.50, 0.55, ... 0.95.
"""
from __future__ import annotations

import numpy as np

COCO_IOUS = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))


def iou_matrix(a, b) -> np.ndarray:
    """IoU of every box of ``a [P, 4]`` with every box of ``b [Q, 4]`` (x1, y1, x2, y2)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    ix1 = np.maximum(a[:, None, 0], b[None, :, 0])
    iy1 = np.maximum(a[:, None, 1], b[None, :, 1])
    ix2 = np.minimum(a[:, None, 2], b[None, :, 2])
    iy2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(ix2 - ix1, 0, None) * np.clip(iy2 - iy1, 0, None)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def split(rows, counts) -> list[np.ndarray]:
    """Rows ``[M, C]`` and per-image counts ``[N]`` -> one ``[m_i, C]`` array per image."""
    rows = np.asarray(rows, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    if rows.size == 0:
        rows = rows.reshape(0, rows.shape[-1] if rows.ndim == 2 else 6)
    if counts.sum() != len(rows) or (counts < 0).any():
        raise ValueError(f"counts add up to {int(counts.sum())}, but there are {len(rows)} rows")
    return np.split(rows, np.cumsum(counts)[:-1]) if len(counts) else []


def ground_truth(boxes, classes, counts) -> list[np.ndarray]:
    """``gt_boxes``/``gt_classes``/``gt_counts`` -> per image ``[k_i, 5]`` (class, x1..y2)."""
    rows = np.concatenate([np.asarray(classes, dtype=np.float64).reshape(-1, 1),
                           np.asarray(boxes, dtype=np.float64).reshape(-1, 4)], axis=1)
    return split(rows, counts)


def _greedy(det: np.ndarray, gts: list[np.ndarray], thr: float):
    """Match ``det`` ([D, 3]: image, score, index into that image's gts) to ``gts`` by falling
    score. Returns the true-positive flags in score order and the matches (det, gt, iou)."""
    tp = np.zeros(len(det), dtype=bool)
    matches = []
    used = [np.zeros(len(g), dtype=bool) for g in gts]
    for d, (img, box) in enumerate(det):
        g = gts[img]
        if not len(g):
            continue
        ious = iou_matrix(box[None], g[:, 1:5])[0]
        ious[used[img]] = -1.0
        j = int(np.argmax(ious))
        if ious[j] >= thr:
            used[img][j] = True
            tp[d] = True
            matches.append((d, img, j, float(ious[j])))
    return tp, matches


def _ap101(tp: np.ndarray, n_gt: int) -> float:
    if n_gt == 0:
        return float("nan")
    if not len(tp):
        return 0.0
    ctp = np.cumsum(tp)
    recall = ctp / n_gt
    precision = ctp / np.arange(1, len(tp) + 1)
    envelope = np.maximum.accumulate(precision[::-1])[::-1]
    points = np.linspace(0.0, 1.0, 101)
    idx = np.searchsorted(recall, points, side="left")
    return float(np.mean([envelope[i] if i < len(envelope) else 0.0 for i in idx]))


def _class_dets(dets: list[np.ndarray], cls: float):
    """Every image's detections of class ``cls`` by falling score: [(image, box)], scores."""
    items = [(float(r[1]), img, r[2:6]) for img, d in enumerate(dets) for r in d if r[0] == cls]
    items.sort(key=lambda t: -t[0])
    return [(img, box) for _, img, box in items], np.array([s for s, _, _ in items])


def average_precision(dets: list[np.ndarray], gts: list[np.ndarray], cls: float, thr: float) -> float:
    order, _ = _class_dets(dets, cls)
    g_cls = [g[g[:, 0] == cls] for g in gts]
    tp, _ = _greedy(order, g_cls, thr)
    return _ap101(tp, sum(len(g) for g in g_cls))


def mean_ap(dets: list[np.ndarray], gts: list[np.ndarray], thresholds=(0.5,)) -> float:
    """mAP over the classes with ground truth, averaged over IoU ``thresholds``."""
    if len(dets) != len(gts):
        raise ValueError(f"detections for {len(dets)} images, ground truth for {len(gts)}")
    classes = sorted({float(c) for g in gts for c in g[:, 0]})
    if not classes:
        return 0.0 if any(len(d) for d in dets) else 1.0
    return float(np.mean([np.nanmean([average_precision(dets, gts, c, t) for c in classes])
                          for t in thresholds]))


def detection_scores(dets: list[np.ndarray], gts: list[np.ndarray]) -> dict:
    return {"map50": mean_ap(dets, gts), "map50_95": mean_ap(dets, gts, COCO_IOUS)}


def against_float(dets: list[np.ndarray], float_dets: list[np.ndarray], score_threshold: float = 0.5) -> dict:
    """The artifact's detections against the float model's own (those scoring at least
    ``score_threshold`` are the ground truth): mAP@0.5, and over the boxes matched at IoU 0.5
    (same class, greedily by the artifact's score) their mean IoU and mean score error."""
    gts = [np.concatenate([f[f[:, 1] >= score_threshold][:, :1], f[f[:, 1] >= score_threshold][:, 2:6]], 1)
           for f in float_dets]
    kept = [f[f[:, 1] >= score_threshold] for f in float_dets]
    ious, errs = [], []
    for cls in sorted({float(c) for g in gts for c in g[:, 0]}):
        order, scores = _class_dets(dets, cls)
        g_cls = [g[g[:, 0] == cls] for g in gts]
        k_cls = [k[k[:, 0] == cls] for k in kept]
        _, matches = _greedy(order, g_cls, 0.5)
        for d, img, j, iou in matches:
            ious.append(iou)
            errs.append(abs(scores[d] - k_cls[img][j, 1]))
    n_gt = sum(len(g) for g in gts)
    best = max((float(f[:, 1].max()) for f in float_dets if len(f)), default=None)
    return {"map50": mean_ap(dets, gts) if n_gt else None, "matched": len(ious), "float_boxes": n_gt,
            "best_float_score": best,
            "matched_iou": float(np.mean(ious)) if ious else None,
            "score_error": float(np.mean(errs)) if errs else None}


def nms(boxes, scores, score_threshold: float = 0.05, iou_threshold: float = 0.5,
        keep_top_k: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Multi-class NMS of raw outputs: ``boxes [N, A, 4]``, ``scores [N, C, A]`` -> rows
    ``[M, 6]`` and counts ``[N]`` (the ``multiclass_nms3`` layout). The runner's: the code
    the device runs for ``[postprocess] op = "nms"``."""
    from ..runner.postprocess import NmsSettings
    from ..runner.postprocess import nms as runner_nms

    return runner_nms(boxes, scores, NmsSettings(score_threshold, iou_threshold, keep_top_k))
