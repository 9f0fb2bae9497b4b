"""Post-processing of a model's outputs into a task's answers (top-k classes, CTC text, NMS
boxes): one numpy implementation that verify runs on the host and the runner on the device."""
from __future__ import annotations

from dataclasses import dataclass

try:
    import numpy as np
except ImportError:  # probe still reports the device; bench says numpy is missing
    np = None


# ---------------------------------------------------------------- post-processing
# The declared [postprocess] (pipeline.json "postprocess"), implemented once with numpy: verify
# runs it on the host over the artifact's and the float model's outputs, the device runs it over
# its own, and the answers (classes, text, boxes) are what drift.task compares.

POSTPROCESS_OPS = ("none", "topk", "ctc_greedy", "nms", "matrix_nms")
NMS_MAX_KEEP = 1000


def softmax(x, axis=-1):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def ctc_greedy(logits, blank=0, time_axis=1):
    """Greedy CTC decoding of ``[N, T, C]`` scores (``time_axis=0``: ``[T, N, C]``): the best
    class per step, repeats collapsed, then ``blank`` dropped. A list of lists of class ids."""
    x = np.asarray(logits)
    if time_axis == 0:
        x = np.swapaxes(x, 0, 1)
    best = x.argmax(-1) if x.ndim == 3 else x.astype(np.int64)
    out = []
    for row in best:
        seq, prev = [], None
        for c in row.tolist():
            if c != prev and c != blank:
                seq.append(int(c))
            prev = c
        out.append(seq)
    return out


def box_iou(box, others, normalized=True):
    """IoU of one box ``[4]`` with each of ``others [K, 4]`` (x1, y1, x2, y2); ``normalized``
    false: pixel boxes whose width is x2 - x1 + 1, as Paddle's NMS counts them."""
    b = np.asarray(others, dtype=np.float64).reshape(-1, 4)
    one = 0.0 if normalized else 1.0
    ix = np.clip(np.minimum(box[2], b[:, 2]) - np.maximum(box[0], b[:, 0]) + one, 0, None)
    iy = np.clip(np.minimum(box[3], b[:, 3]) - np.maximum(box[1], b[:, 1]) + one, 0, None)
    inter = ix * iy

    def area(x1, y1, x2, y2):
        return np.where((x2 < x1) | (y2 < y1), 0.0, (x2 - x1 + one) * (y2 - y1 + one))

    union = area(*box[:4]) + area(b[:, 0], b[:, 1], b[:, 2], b[:, 3]) - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


NMS_MAX_CANDIDATES = 10000      # per class and image, whatever nms_top_k asks


def _nms_limits(nms_top_k, keep_top_k, cap):
    """(candidates per class, rows per image): -1 or more than the bounds means the bounds."""
    top = cap if int(nms_top_k) < 0 else min(int(nms_top_k), cap)
    return top, NMS_MAX_KEEP if int(keep_top_k) < 0 else min(int(keep_top_k), NMS_MAX_KEEP)


def _class_candidates(scores, above, background_label, top):
    """Per class of one image's ``scores [C, A]`` but ``background_label``: (class, its scores,
    the indices of its ``top`` best boxes where ``above`` holds, best first; ties by index)."""
    for c, sc in enumerate(scores):
        if c == int(background_label):
            continue
        idx = np.nonzero(above[c])[0]
        yield c, sc, idx[np.argsort(-sc[idx], kind="stable")][:top]


@dataclass(frozen=True)
class NmsSettings:
    """The attributes of Paddle's ``multiclass_nms3`` that :func:`nms` follows."""
    score_threshold: float = 0.05
    iou_threshold: float = 0.5
    keep_top_k: int = 100
    nms_top_k: int = -1
    normalized: bool = True
    background_label: int = -1
    nms_eta: float = 1.0

    @classmethod
    def of(cls, post):
        """From a ``[postprocess]`` op ``nms`` (pipeline.json), typed and ``keep_top_k`` bounded."""
        return cls(float(post.get("score_threshold", 0.05)), float(post.get("iou_threshold", 0.5)),
                   min(int(post.get("keep_top_k", 100)), NMS_MAX_KEEP), int(post.get("nms_top_k", -1)),
                   bool(post.get("normalized", True)), int(post.get("background_label", -1)),
                   float(post.get("nms_eta", 1.0)))


@dataclass(frozen=True)
class MatrixNmsSettings:
    """The attributes of Paddle's ``matrix_nms`` that :func:`matrix_nms` follows."""
    score_threshold: float = 0.05
    post_threshold: float = 0.05
    nms_top_k: int = -1
    keep_top_k: int = 100
    use_gaussian: bool = False
    gaussian_sigma: float = 2.0
    background_label: int = 0
    normalized: bool = True

    @classmethod
    def of(cls, post):
        """From a ``[postprocess]`` op ``matrix_nms`` (pipeline.json), typed."""
        return cls(float(post.get("score_threshold", 0.05)), float(post.get("post_threshold", 0.05)),
                   int(post.get("nms_top_k", -1)), int(post.get("keep_top_k", 100)),
                   bool(post.get("use_gaussian", False)), float(post.get("gaussian_sigma", 2.0)),
                   int(post.get("background_label", 0)), bool(post.get("normalized", True)))


def nms(boxes, scores, settings=None):
    """Multi-class NMS of raw detector outputs, PicoDet style: ``boxes [N, A, 4]``, ``scores
    [N, C, A]`` -> rows ``[M, 6]`` (class, score, x1, y1, x2, y2) and counts ``[N]``, the layout
    of Paddle's ``multiclass_nms3``, whose attributes ``settings`` holds: per class (but
    ``background_label``) the ``nms_top_k`` best boxes above ``score_threshold``, each kept
    when its IoU with every box kept before is at most the threshold (times ``nms_eta`` after
    each kept box while above 0.5); per image the ``keep_top_k`` best."""
    boxes = np.asarray(boxes, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64)
    st = settings or NmsSettings()
    top, keep_top_k = _nms_limits(st.nms_top_k, st.keep_top_k, NMS_MAX_CANDIDATES)
    rows, counts = [], []
    for b, s in zip(boxes, scores):
        found = []
        for c, sc, idx in _class_candidates(s, s >= st.score_threshold, st.background_label, top):
            kept, thr = [], float(st.iou_threshold)
            for i in idx:
                if not kept or box_iou(b[i], b[kept], st.normalized).max() <= thr:
                    kept.append(i)
                    found.append((c, sc[i], b[i][0], b[i][1], b[i][2], b[i][3]))
                    if st.nms_eta < 1.0 and thr > 0.5:
                        thr *= float(st.nms_eta)
        found.sort(key=lambda r: -r[1])
        found = found[:keep_top_k]
        rows += found
        counts.append(len(found))
    return np.array(rows, dtype=np.float32).reshape(-1, 6), np.array(counts, dtype=np.int32)


MATRIX_NMS_MAX_CANDIDATES = 2048   # per class and image: the IoU matrix is this squared (16 MB)


def matrix_nms(boxes, scores, settings=None):
    """Paddle's ``matrix_nms`` (SOLOv2's Matrix NMS, as its CPU kernel computes it, in float32):
    ``boxes [N, A, 4]``, ``scores [N, C, A]`` -> rows ``[M, 6]`` (class, decayed score, x1, y1,
    x2, y2) and counts ``[N]``; ``settings`` holds the op's attributes. Per class (but
    ``background_label``): the ``nms_top_k`` best
    boxes above ``score_threshold``, each box's score decayed by the smallest over the boxes
    ranked above it of f(IoU with it, that box's own largest IoU with a box above it), f linear
    ``(1 - iou) / (1 - max_iou)`` or gaussian ``exp((max_iou^2 - iou^2) * gaussian_sigma)``; kept
    when the decayed score is above ``post_threshold``; per image the ``keep_top_k`` best. At
    most ``MATRIX_NMS_MAX_CANDIDATES`` boxes per class and image enter the matrix."""
    boxes = np.asarray(boxes, dtype=np.float32)
    scores = np.asarray(scores, dtype=np.float32)
    st = settings or MatrixNmsSettings()
    top, keep_top_k = _nms_limits(st.nms_top_k, st.keep_top_k, MATRIX_NMS_MAX_CANDIDATES)
    one = np.float32(0.0 if st.normalized else 1.0)
    rows, counts = [], []
    for b, s in zip(boxes, scores):
        found = []
        for c, sc, idx in _class_candidates(s, s > np.float32(st.score_threshold), st.background_label, top):
            if not len(idx):
                continue
            bx, sv = b[idx], sc[idx]
            ix = np.minimum(bx[:, None, 2], bx[None, :, 2]) - np.maximum(bx[:, None, 0], bx[None, :, 0]) + one
            iy = np.minimum(bx[:, None, 3], bx[None, :, 3]) - np.maximum(bx[:, None, 1], bx[None, :, 1]) + one
            apart = ((bx[None, :, 0] > bx[:, None, 2]) | (bx[None, :, 2] < bx[:, None, 0])
                     | (bx[None, :, 1] > bx[:, None, 3]) | (bx[None, :, 3] < bx[:, None, 1]))
            inter = ix * iy
            w, h = bx[:, 2] - bx[:, 0], bx[:, 3] - bx[:, 1]
            area = np.where((w < 0) | (h < 0), np.float32(0), (w + one) * (h + one))
            with np.errstate(divide="ignore", invalid="ignore"):
                iou = np.where(apart, np.float32(0), inter / (area[:, None] + area[None, :] - inter))
                lower = np.tril(iou, -1).astype(np.float32)             # [i, j]: box i against j above it
                iou_max = lower.max(axis=1)
                if st.use_gaussian:
                    decay = np.exp((iou_max[None, :] ** 2 - lower ** 2) * np.float32(st.gaussian_sigma))
                else:
                    decay = (np.float32(1) - lower) / (np.float32(1) - iou_max[None, :])
            above = np.tril(np.ones_like(lower, dtype=bool), -1)
            decay = np.where(above & ~np.isnan(decay), decay, np.float32(1))
            ds = decay.min(axis=1) * sv        # the first box: no box above it, decay 1
            for i in np.nonzero(ds > np.float32(st.post_threshold))[0]:
                found.append((c, ds[i], *bx[i][:4]))
        order = sorted(range(len(found)), key=lambda k: -found[k][1])[:keep_top_k]
        rows += [found[k] for k in order]
        counts.append(len(order))
    return np.array(rows, dtype=np.float32).reshape(-1, 6), np.array(counts, dtype=np.int32)


def _padded(seqs):
    width = max([len(s) for s in seqs] + [1])
    out = np.full((len(seqs), width), -1, dtype=np.int64)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = s
    return out


def postprocess(outputs, post):
    """The model's outputs (a list of arrays, batch first) through ``post`` (pipeline.json
    "postprocess": {"op": ...}) -> the answers, a dict of arrays. ops: none (the outputs as
    they are), topk {output, k, softmax} -> classes [N, k], scores [N, k]; ctc_greedy {output,
    blank, time_axis} -> text [N, L] (class ids, padded with -1); nms {boxes, scores,
    score_threshold, iou_threshold, keep_top_k} -> rows [M, 6], counts [N]; matrix_nms {boxes,
    scores, score_threshold, post_threshold, nms_top_k, keep_top_k, use_gaussian, gaussian_sigma,
    background_label, normalized} -> the same."""
    post = post or {}
    op = post.get("op", "none")
    if op == "none":
        return dict(("output_%d" % i, np.asarray(o)) for i, o in enumerate(outputs))
    if op == "topk":
        x = np.asarray(outputs[int(post.get("output", 0))], dtype=np.float64)
        x = x.reshape(len(x), -1)
        p = softmax(x, axis=1) if post.get("softmax", True) else x
        k = min(int(post.get("k", 5)), p.shape[1])
        top = np.argsort(-p, axis=1, kind="stable")[:, :k]
        return {"classes": top.astype(np.int64), "scores": np.take_along_axis(p, top, 1).astype(np.float32)}
    if op == "ctc_greedy":
        x = outputs[int(post.get("output", 0))]
        return {"text": _padded(ctc_greedy(x, int(post.get("blank", 0)), int(post.get("time_axis", 1))))}
    if op in ("nms", "matrix_nms"):
        boxes, scores = outputs[int(post.get("boxes", 0))], outputs[int(post.get("scores", 1))]
        rows, counts = (nms(boxes, scores, NmsSettings.of(post)) if op == "nms"
                        else matrix_nms(boxes, scores, MatrixNmsSettings.of(post)))
        return {"rows": rows, "counts": counts}
    raise ValueError("unknown post-processing op %r (one of %s)" % (op, ", ".join(POSTPROCESS_OPS)))
