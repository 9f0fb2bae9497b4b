"""Histogram calibration never sees a degenerate range.

onnxruntime's histogram calibrators (``Entropy``: edgeforge's KL/mse thresholds, ``Percentile``:
``--calibration hist``) bin every calibrated tensor with ``np.histogram``. A tensor whose range
cannot hold that many finite bins stops the whole build: a span below the dtype's resolution at
its magnitude (a saturated hard-sigmoid gate at 1.0 - 6e-8 .. 1.0 in float32), a subnormal
maximum, an inf (``Too many bins for data range. Cannot create 2048 finite-sized bins``,
``supplied range of [-inf, inf] is not finite``). Here such a tensor is not binned: it is
calibrated by the min/max of its finite values (what ``--calibration abs_max`` does), and the
build records which tensors and why (``quantization.degenerate_ranges``) and says so in one line.

Paddle's PTQ (the Lite path) bins |x| over float64 edges, which a finite float32 range always
fills; an inf or NaN there would make the range itself non-finite, so edgeforge's sampling
(``quant.kl.ptq_methods``) takes the range of the finite values and records the activation.
"""
from __future__ import annotations

import contextlib
import importlib
from typing import Iterator

import numpy as np

from ..build_meta import BuildMeta, Quantization

MAX_BINS = 1 << 20       # a range that grows this much between batches would need more bins than this


def equal_bins_fail(lo, hi, bins: int, dtype) -> bool:
    """Whether ``bins`` equal bins over [lo, hi] are not all of finite, positive width in
    ``dtype``: numpy >= 2.1's ``np.histogram`` raises ``Too many bins for data range`` then, and
    numpy 1.26 silently makes bins of zero width (same edges, same rule: ``np.linspace`` in the
    result type, widened by 0.5 each side when lo == hi)."""
    lo, hi = np.asarray(lo, dtype)[()], np.asarray(hi, dtype)[()]
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, bins + 1, endpoint=True, dtype=np.result_type(lo, hi, np.zeros(0, dtype)))
    return bool(np.any(edges[:-1] >= edges[1:]))


def why_degenerate(values, bins: int, absolute: bool, old=None) -> str | None:
    """Why onnxruntime's histogram of ``values`` (``absolute``: of |x| over its own range, as the
    symmetric percentile collector bins it; else over [-max|x|, max|x|]) cannot be made, or
    None. ``old``: the histogram entry of earlier batches (hist, edges, ...), whose bins a wider
    range extends."""
    a = np.asarray(values).reshape(-1)
    if a.size == 0 or a.dtype.kind != "f":
        return None
    finite = np.isfinite(a)
    if not finite.all():
        return f"{int(a.size - finite.sum())} non-finite value(s) (inf/nan)"
    mag = np.abs(a)
    lo, hi = (mag.min(), mag.max()) if absolute else (-mag.max(), mag.max())
    if equal_bins_fail(lo, hi, bins, a.dtype):
        return f"range [{float(lo):.9g}, {float(hi):.9g}] cannot hold {bins} finite {a.dtype} bins"
    if old is not None:
        edges = np.asarray(old[1])
        width = float(edges[1] - edges[0]) if edges.size > 1 else 0.0
        if width > 0 and float(hi) > float(edges[-1]) and (float(hi) - float(edges[-1])) / width > MAX_BINS:
            return (f"range grows from {float(edges[-1]):.3g} to {float(hi):.3g} between batches "
                    f"(over {MAX_BINS} bins of {width:.3g})")
    return None


def _finite_range(a: np.ndarray):
    a = np.asarray(a).reshape(-1)
    f = a[np.isfinite(a)] if a.dtype.kind == "f" else a
    dtype = a.dtype if a.dtype.kind == "f" else np.dtype(np.float32)
    if f.size == 0:
        return np.array(0, dtype), np.array(0, dtype)
    return np.array(f.min(), dtype), np.array(f.max(), dtype)


@contextlib.contextmanager
def guard_histograms(record: dict) -> Iterator[None]:
    """Within this block, onnxruntime's histogram collector leaves out the tensors
    :func:`why_degenerate` names (``record``: tensor -> why) and every calibrator made by
    ``quantize_static`` gives them their finite min/max range instead."""
    from onnxruntime.quantization.calibrate import HistogramCollector, TensorData, TensorsData

    q = importlib.import_module("onnxruntime.quantization.quantize")
    collect, create = HistogramCollector.collect, q.create_calibrator

    def guarded_collect(self, name_to_arr):
        fallen = self.__dict__.setdefault("edgeforge_minmax", {})
        absolute = self.method == "percentile" and self.symmetric
        keep = {}
        for name, arr in name_to_arr.items():
            if isinstance(arr, (list, tuple)):                # one array per calibration run
                arr = np.concatenate([np.asarray(x).reshape(-1) for x in arr]) if arr else np.zeros(0, np.float32)
            arr = np.asarray(arr)
            why = None if name in fallen else why_degenerate(arr, self.num_bins, absolute,
                                                             self.histogram_dict.get(name))
            if name not in fallen and why is None:
                keep[name] = arr
                continue
            lo, hi = _finite_range(arr)
            old = self.histogram_dict.pop(name, None)          # earlier batches' min/max count too
            prev = fallen.get(name) or ((old[2], old[3]) if old is not None else (lo, hi))
            fallen[name] = (np.minimum(prev[0], lo), np.maximum(prev[1], hi))
            record.setdefault(name, why)
        return collect(self, keep) if keep else None

    def create_calibrator(*args, **kwargs):
        cal = create(*args, **kwargs)
        compute = cal.compute_data

        def compute_data():
            coll = getattr(cal, "collector", None)
            fallen = getattr(coll, "edgeforge_minmax", None) or {}
            if fallen and not coll.histogram_dict:       # every tensor fell back: nothing to bin
                from onnxruntime.quantization.calibrate import CalibrationMethod

                data = TensorsData(CalibrationMethod.MinMax, {})
            else:
                data = compute()
            for name, (lo, hi) in fallen.items():
                data.data[name] = TensorData(lowest=lo, highest=hi)
            return data
        cal.compute_data = compute_data
        return cal

    HistogramCollector.collect, q.create_calibrator = guarded_collect, create_calibrator
    try:
        yield
    finally:
        HistogramCollector.collect, q.create_calibrator = collect, create


def note(meta: BuildMeta, record: dict, log, fallback: str = "min/max of the finite values (abs_max)") -> None:
    """The manifest's ``quantization.degenerate_ranges`` and the build's one line."""
    if not record:
        return
    if meta.quantization is None:
        meta.quantization = Quantization()
    meta.quantization.degenerate_ranges = {"fallback": fallback, "tensors": dict(sorted(record.items()))}
    names = sorted(record)
    log(f"{len(names)} tensor(s) with a degenerate range (constant, inf or subnormal span), not binned as "
        f"they are ({fallback}): {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}")


def note_fast_kl(meta: BuildMeta, record: dict, log) -> None:
    """Paddle PTQ (the Lite path): ``quantization.fast_kl`` (whether edgeforge's fast KL paths
    took, and why not), and the activations binned over their finite values only."""
    if not record:
        return
    fast = {k: v for k, v in record.items() if k != "degenerate_ranges"}
    meta.quantization.fast_kl = fast
    if not fast["enabled"]:
        log(f"fast KL calibration off: {fast['reason']}")
    note(meta, dict(record.get("degenerate_ranges") or {}), log,
         fallback="the histogram of the finite values: an inf or NaN is left out")
