"""The evaluation labels each task kind reads from the evaluation .npz, checked.

- classification, embedding: ``labels [N]`` (integers);
- segmentation: ``labels [N, H, W]`` (integers; 255 is ignored);
- ctc: ``labels [N, L]``, padded with -1;
- detection: ``gt_boxes [K, 4]``, ``gt_classes [K]`` and ``gt_counts [N]`` (sum = K).
"""
from __future__ import annotations

import numpy as np

from .evaluate import DETECTION_LABELS, LABEL_KEYS

_LABEL_NDIM = {"classification": 1, "embedding": 1, "segmentation": 3, "ctc": 2, "generic": None}


def check_labels(kind: str, arrays: dict, count: int | None) -> dict:
    """The label arrays of ``arrays`` that ``kind`` reads; ValueError names what is wrong."""
    if kind == "detection":
        have = [k for k in DETECTION_LABELS if k in arrays]
        if not have:
            return {}
        if len(have) != 3:
            raise ValueError(f"detection labels are gt_boxes [K, 4], gt_classes [K] and gt_counts [N] "
                             f"together; there is only {', '.join(have)}")
        b, c, n = (np.asarray(arrays[k]) for k in DETECTION_LABELS)
        if b.ndim != 2 or b.shape[1] != 4:
            raise ValueError(f"gt_boxes must be [K, 4] (x1, y1, x2, y2), not {list(b.shape)}")
        if c.shape != (len(b),):
            raise ValueError(f"gt_classes must be [K] = [{len(b)}], not {list(c.shape)}")
        if n.ndim != 1 or (count is not None and len(n) != count) or not np.issubdtype(n.dtype, np.integer):
            raise ValueError(f"gt_counts must be [N] integers, one per sample ({count})")
        if int(n.sum()) != len(b) or (n < 0).any():
            raise ValueError(f"gt_counts add up to {int(n.sum())}, but there are {len(b)} gt_boxes")
        return {k: arrays[k] for k in DETECTION_LABELS}
    if "labels" not in arrays:
        return {}
    lab = np.asarray(arrays["labels"])
    ndim = _LABEL_NDIM.get(kind)
    if not np.issubdtype(lab.dtype, np.integer) or (count is not None and len(lab) != count):
        raise ValueError("'labels' must be an integer array with one entry per sample")
    if ndim is not None and lab.ndim != ndim:
        want = {1: "[N]", 2: "[N, L] padded with -1", 3: "[N, H, W]"}[ndim]
        raise ValueError(f"[task] kind = \"{kind}\" reads labels {want}, not {list(lab.shape)}")
    return {"labels": lab}


def first(labels: dict | None, n: int) -> dict | None:
    """The labels of the first ``n`` samples."""
    if not labels:
        return labels
    if "gt_counts" in labels:
        k = int(np.sum(labels["gt_counts"][:n]))
        return {"gt_boxes": labels["gt_boxes"][:k], "gt_classes": labels["gt_classes"][:k],
                "gt_counts": labels["gt_counts"][:n]}
    return {k: v[:n] for k, v in labels.items() if k in LABEL_KEYS}
