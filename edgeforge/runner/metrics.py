"""Drift: a model's outputs against the float reference (errors, cosine, top-1 agreement,
accuracy drop), and the evaluation outputs packed small for the host's task metric. Pure: the
host's verify computes the same figures with this code."""
from __future__ import annotations

try:
    import numpy as np
except ImportError:  # probe still reports the device; bench says numpy is missing
    np = None


# ---------------------------------------------------------------- drift

DRIFT_BATCH = 64                # samples per predictor call in the drift pass (the browser page's too)


def jsonable(x):
    if isinstance(x, float) and x != x:
        return None
    return x


def drift_metrics(outputs, reference, labels=None):
    """Compare outputs with the float reference. Figures for output 0 at the top level,
    every output under "outputs". accuracy_drop is in percentage points."""
    per = []
    for out, ref in zip(outputs, reference):
        out = np.asarray(out, dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        if out.shape != ref.shape:
            # a detector's NMS rows vary in number: no tensor figures (its drift is drift.task)
            per.append(dict(dict.fromkeys(("max_abs_error", "mean_abs_error", "rel_max_abs_error", "cosine",
                                           "top1_agreement", "accuracy", "float_accuracy", "accuracy_drop")),
                            shape=list(out.shape), reference_shape=list(ref.shape)))
            continue
        diff = np.abs(out - ref)
        n = out.shape[0] if out.ndim else 1
        o2 = out.reshape(n, -1)
        r2 = ref.reshape(n, -1)
        denom = np.linalg.norm(o2, axis=1) * np.linalg.norm(r2, axis=1)
        num = np.sum(o2 * r2, axis=1)
        cos = np.where(denom > 0, num / np.where(denom > 0, denom, 1.0), np.where(np.all(o2 == r2, axis=1), 1.0, 0.0))
        ref_scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        m = {
            "max_abs_error": float(diff.max()) if diff.size else 0.0,
            "mean_abs_error": float(diff.mean()) if diff.size else 0.0,
            "rel_max_abs_error": float(diff.max() / ref_scale) if ref_scale > 0 and diff.size else 0.0,
            "cosine": float(np.mean(cos)),
            "top1_agreement": None, "accuracy": None, "float_accuracy": None, "accuracy_drop": None,
        }
        if out.ndim >= 2 and out.shape[-1] > 1:
            top_o = out.reshape(n, -1).argmax(1) if out.ndim == 2 else out.argmax(-1)
            top_r = ref.reshape(n, -1).argmax(1) if ref.ndim == 2 else ref.argmax(-1)
            m["top1_agreement"] = float(np.mean(top_o == top_r))
            if labels is not None and out.ndim == 2 and len(labels) == n:
                lab = np.asarray(labels)
                m["accuracy"] = float(np.mean(top_o == lab))
                m["float_accuracy"] = float(np.mean(top_r == lab))
                m["accuracy_drop"] = round((m["float_accuracy"] - m["accuracy"]) * 100.0, 10)
        per.append(m)
    top = dict((k, v) for k, v in (per[0] if per else {}).items() if k not in ("shape", "reference_shape"))
    top["outputs"] = per
    return top


OUTPUTS_MAX_BYTES = 8 << 20      # compressed evaluation outputs sent back for the host's task metric


def _npz_bytes(arrays):
    import io

    buf = io.BytesIO()
    np.savez_compressed(buf, **dict((k, np.asarray(v)) for k, v in arrays.items()))
    return buf.getvalue()


def reduce_outputs(outs, reduce):
    """``spec["reduce"]`` ({"op": "argmax", "output": k}, a segmenter): output k as its class map
    (uint8, or uint16 past 255 classes) instead of its scores, all the task metric reads."""
    if not reduce or reduce.get("op") != "argmax":
        return outs
    k = reduce.get("output", 0)
    outs = list(outs)
    if not isinstance(k, int) or not 0 <= k < len(outs):
        return outs
    x = np.asarray(outs[k])
    if x.ndim == 4:
        outs[k] = x.argmax(1).astype(np.uint8 if x.shape[1] <= 256 else np.uint16)
    return outs


def packed_outputs(outs, max_bytes=None):
    """The evaluation outputs as base64 of a compressed .npz (output_0, output_1, ...; or the
    keys of a dict: the answers of the declared post-processing), bounded: past ``max_bytes``
    the first samples that fit (halving; raw outputs only). Returns (base64, samples sent: None
    for answers) or (None, the reason)."""
    import base64

    cap = OUTPUTS_MAX_BYTES if max_bytes is None else max_bytes
    arrays = outs if isinstance(outs, dict) else dict(("output_%d" % i, o) for i, o in enumerate(outs))
    batched = not isinstance(outs, dict) and all(np.ndim(v) for v in arrays.values())
    n = min(len(v) for v in arrays.values()) if batched and arrays else None
    data = _npz_bytes(arrays)
    while len(data) > cap and batched and n > 1:
        n //= 2
        data = _npz_bytes(dict((k, np.asarray(v)[:n]) for k, v in arrays.items()))
    if len(data) > cap:
        return None, "the evaluation outputs are %d bytes compressed (more than %d)" % (len(data), cap)
    return base64.b64encode(data).decode("ascii"), n
