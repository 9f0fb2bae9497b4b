"""The reference data a bench ships: the evaluation set's first samples and their float outputs,
sized to the statistical job and compressed.

The host's verify runs the whole evaluation set; the device only has to measure drift, and for
that a bounded sample is enough. :func:`device_samples` takes at most :data:`MAX_SAMPLES`
samples (an observed top-1 agreement of 100 % on 1000 samples bounds the true one at >= 99.6 %,
95 % Wilson) and at most :data:`MAX_BYTES` of raw inputs and float outputs (a segmenter's
outputs are megabytes per sample: its figures are per pixel, so a few images still hold tens of
thousands of them). The files are compressed .npz with fixed timestamps (:func:`savez_stable`); the bench sends them keyed by their
sha256 (:mod:`edgeforge.device.link.sync`), so a second bench, of this build or of another
precision of the same model, uploads none of it.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np


MAX_SAMPLES = 1000
MAX_BYTES = 8 << 20          # raw inputs + float outputs the device gets (the goal: 8 MB)
Z95 = 1.959964
INPUTS = "reference/device_inputs.npz"
OUTPUTS = "reference/device_outputs.npz"


def wilson_low(agree: int, n: int, z: float = Z95) -> float:
    """The lower end of the two-sided Wilson interval of a share ``agree / n``."""
    if n <= 0:
        return 0.0
    p = agree / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - margin) / (1 + z * z / n))


def device_samples(total: int, bytes_per_sample: int, max_samples: int = MAX_SAMPLES,
                   max_bytes: int = MAX_BYTES) -> int:
    """How many of ``total`` evaluation samples ship: at most ``max_samples`` and
    ``max_bytes`` of raw data, at least one."""
    fit = max_bytes // max(1, int(bytes_per_sample))
    return max(1, min(int(total), int(max_samples), int(fit)))


def confidence(n: int, total: int, pixels: int = 0) -> str:
    """What ``n`` samples buy, in one line for the manifest and the bench."""
    line = (f"{n} of {total} evaluation samples: a top-1 agreement of 100 % on them bounds the true "
            f"agreement at >= {wilson_low(n, n) * 100:.1f} % (95 % Wilson)")
    if pixels:
        line += f"; per pixel, {n * pixels} pixels (>= {wilson_low(n * pixels, n * pixels) * 100:.3f} %)"
    return line


def savez_stable(path: Path, arrays: dict) -> None:
    """``np.savez_compressed`` with fixed zip timestamps: the same arrays give the same bytes,
    so the same sha256 (numpy stamps each member with the time of writing)."""
    import zipfile

    tmp = path.with_name(f".{path.name}.part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asarray(arr), allow_pickle=False)
    tmp.replace(path)


def _first(labels: dict, n: int) -> dict:
    """The labels of the first ``n`` samples (detection's ``gt_counts`` say how many rows)."""
    if "gt_counts" not in labels:
        return {k: v[:n] for k, v in labels.items()}
    rows = int(np.sum(labels["gt_counts"][:n]))
    return {k: (v[:n] if k == "gt_counts" else v[:rows]) for k, v in labels.items()}


def write_device_reference(out_dir: Path, feeds: dict, labels: dict, reference: list) -> dict:
    """Write the device's reference (the first samples of ``feeds``, ``labels`` and the float
    outputs ``reference``) under ``out_dir``; returns the manifest's ``reference`` fields. Where
    an output is not one row per sample (NMS rows), every sample ships."""
    total = len(next(iter(feeds.values())))
    arrays = (*feeds.values(), *labels.values(), *reference)
    per = -(-sum(int(np.asarray(a).nbytes) for a in arrays) // max(1, total))
    batched = all(np.asarray(o).ndim and len(o) == total for o in reference)
    n = device_samples(total, per) if batched else total
    ins = {k: np.ascontiguousarray(v) for k, v in {**{k: v[:n] for k, v in feeds.items()},
                                                     **_first(labels, n)}.items()}
    outs = {f"output_{i}": np.ascontiguousarray(o[:n] if batched else o) for i, o in enumerate(reference)}
    (out_dir / INPUTS).parent.mkdir(parents=True, exist_ok=True)
    savez_stable(out_dir / INPUTS, ins)
    savez_stable(out_dir / OUTPUTS, outs)
    out0 = np.asarray(reference[0]) if reference else np.zeros((1, 1))
    pixels = int(np.prod(out0.shape[2:])) if out0.ndim == 4 else 0
    sent = (out_dir / INPUTS).stat().st_size + (out_dir / OUTPUTS).stat().st_size
    return {"inputs": INPUTS, "outputs": OUTPUTS, "samples": n, "evaluation_samples": int(total),
            "raw_bytes": per * n, "bytes": int(sent), "confidence": confidence(n, total, pixels)}
