"""Vectorised KL calibration threshold search with the exact choice of Paddle's reference.

Paddle's ``paddle.static.quantization.cal_kl_threshold.cal_kl_threshold`` tries every
threshold bin ``i`` in ``[(bins - 1) // 2, bins)`` and, for each, builds the clipped
reference distribution P (outliers folded into bin ``i - 1``), the 127-level (8 bit)
candidate Q expanded back over P's non-empty bins, and the KL divergence between them, in
pure Python: O(bins^2) list work, 1-3 s per activation at 2048 bins.

:func:`cal_kl_threshold_fast` returns the same value, bit for bit, in two steps:

1. **Screen (vectorised).** For every ``i`` at once the KL divergence is evaluated in closed
   form from prefix sums: with integer counts, ``sum_k p_k log(Q p_k)`` is
   ``P log Q + sum_k p_k log p_k`` and ``sum_k p_k log(P q_k)`` is
   ``P log P + sum_b w_b log(quant_b / cnt_b)`` over the 127 merged blocks, so each ``i``
   costs O(127) instead of O(bins) Python operations.
2. **Refine (faithful).** The screened values are not bit-identical to the reference's
   (the reference sums ~2000 terms sequentially, and ``math.log`` (libm) and ``np.log``
   (numpy's SIMD log) differ in the last ulp on a quarter of inputs on AVX-512 machines).
   A first-order rounding-error bound ``tol_i`` on |screen - reference| (with an 8x margin;
   the largest error seen in tests is 3% of it) is computed, and
   every ``i`` that could be the reference's argmin (``screen_i <= min_j(screen_j + tol_j)
   + tol_i``) is recomputed with the reference's own operations, in the reference's order:
   the same IEEE products and divisions (numpy float64 == Python float), ``math.log``,
   builtin ``sum`` for ``Q_sum`` and a strictly sequential accumulation for the entropy
   sums. Among those candidates, the first strict minimum in increasing ``i`` wins, as in
   the reference (ties included). In practice a single candidate remains, and is taken
   without refining.

Inputs the fast path does not cover (non-integral or negative counts, float dtypes other than
float64, totals beyond 2**53 or the dtype's range, fewer than 3 bins, ``bits < 2``) are passed
to the reference implementation unchanged. Paddle's PTQ passes int64 counts: always fast.

Once the search is fast, KL PTQ time goes to the sampling stage. Paddle's
``_sample_histogram`` calls ``np.histogram(np.abs(t), bins=edges)`` with an *array* of edges,
which numpy serves by sorting every 65536-element block, both sampling passes copy every
activation out of the scope, and the second pass runs the whole program again on the same
batches. :func:`fast_kl` replaces, in ``PostTrainingQuantization`` (only while their source is
the Paddle 3.3 one they mirror):

* ``_sample_histogram``: the counts come from Paddle's own C++ ``histogram`` kernel run on
  float64 copies of |x| (block by block), where :func:`_kernel_plan` proves, edge by edge with
  the kernel's double arithmetic, that its bins are numpy's for every float32 input (a one-time
  probe checks the installed binary); otherwise :func:`abs_histogram`, a numpy kernel with an
  O(1) bin estimate corrected against the float32 images of the edges. Same int64 counts.
* ``_collect_activation_abs_min_max``: the same floats, without a full |x| copy.
* ``quantize``: the preparation pass keeps each batch's activations (the scope hands its buffers
  over, zero-copy; bounded by ``keep_bytes``) and the sampling pass histograms a kept batch
  instead of running the program again, when the loader yields a bitwise-equal feed for it.
  Activations are read as zero-copy DLPack views throughout.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

__all__ = ["cal_kl_threshold_fast", "kl_divergences_exact", "abs_histogram",
           "fast_kl", "install", "uninstall", "installed"]

_EPS = np.finfo(np.float64).eps / 2        # unit roundoff u = 2**-53
_TOL_SAFETY = 8.0                          # the bound below is first-order; keep a wide margin

# Where Paddle looks the function up: the defining module, and modules that did
# ``from .cal_kl_threshold import cal_kl_threshold`` (a binding of their own).
_PATCH_SITES = (
    "paddle.static.quantization.cal_kl_threshold",
    "paddle.static.quantization.post_training_quantization",
    "paddle.quantization.imperative.ptq_quantizer",
)
_originals: dict[str, Callable] = {}       # module name -> the function it held before install()
_original_methods: dict[str, Callable] = {}  # PostTrainingQuantization method -> original
_install_depth = 0


# --------------------------------------------------------------------------- reference access
def _reference() -> Callable:
    """Paddle's own ``cal_kl_threshold`` (the original even while patched)."""
    orig = _originals.get(_PATCH_SITES[0])
    if orig is not None:
        return orig
    from paddle.static.quantization import cal_kl_threshold as mod  # noqa: PLC0415

    fn = mod.cal_kl_threshold
    if fn is cal_kl_threshold_fast:            # patched by someone else: dig out the original
        raise RuntimeError("Paddle's cal_kl_threshold is patched but its original is unknown")
    return fn


# --------------------------------------------------------------------------- helpers
def _as_counts(hist: np.ndarray):
    """int64 counts when ``hist`` holds finite, non-negative integers with a total < 2**53
    (then every sum the reference forms is exact, in int or float), else None."""
    if hist.dtype.kind in "iu":
        if hist.size and hist.min() < 0:
            return None
        h = hist.astype(np.int64)
        if hist.dtype.kind == "u" and hist.size and hist.max() > np.iinfo(np.int64).max:
            return None
    elif hist.dtype == np.float64:          # (float32 sums would round where float64's don't)
        if not np.all(np.isfinite(hist)) or np.any(hist < 0) or np.any(hist != np.floor(hist)):
            return None
        if hist.size and hist.max() >= 2.0**53:
            return None
        h = hist.astype(np.int64)
    else:
        return None
    # the reference adds numpy scalars of hist's dtype (sum(hist[i:])): must not overflow it
    total = int(h.sum(dtype=np.int64)) if h.size else 0
    if total >= 2**53:
        return None
    if hist.dtype.kind in "iu" and total > np.iinfo(hist.dtype).max:
        return None
    return h


def _blocks(i: np.ndarray, R: int):
    """Start/end (exclusive) of the R merged blocks for each threshold ``i`` (rows)."""
    m = i // R                                           # == int(i / R) for i < 2**53
    b = np.arange(R, dtype=np.int64)
    starts = m[:, None] * b[None, :]
    ends = m[:, None] * (b[None, :] + 1)
    ends[:, R - 1] = i                                   # last block runs to i
    return starts, ends


def _screen(h: np.ndarray, C: np.ndarray, NZ: np.ndarray, I: np.ndarray, R: int):
    """Closed-form KL for every threshold in ``I`` and a bound on |this - reference|."""
    n = h.shape[0]
    P = int(C[-1])
    Pf = float(P)
    if R > int(I.max()):                                 # every i < R: one block [0, i), as R=1
        R = 1
    starts, ends = _blocks(I, R)
    quant = C[ends] - C[starts]                          # exact int64 block sums
    cnt = NZ[ends] - NZ[starts]                          # non-empty bins per block
    outl = P - C[I]                                      # outliers folded into bin i-1
    w = quant.copy()
    w[:, R - 1] += outl                                  # mass of P inside each block
    with np.errstate(divide="ignore", invalid="ignore"):
        logq = np.where(cnt > 0, np.log(quant / np.where(cnt > 0, cnt, 1)), 0.0)
    s2 = np.sum(w * logq, axis=1)                        # sum_b w_b log q_b
    hf = h.astype(np.float64)
    hlogh = np.where(h > 0, hf * np.log(np.where(h > 0, hf, 1.0)), 0.0)
    HL = np.concatenate(([0.0], np.cumsum(hlogh)))       # prefix sums of h log h
    last = (h[I - 1] + outl).astype(np.float64)          # p_{i-1} (> 0 for screened i)
    s1 = HL[I - 1] + last * np.log(last)                 # sum_k p_k log p_k
    Q = C[I].astype(np.float64)                          # sum of expanded Q == sum h[:i]
    logP = math.log(Pf)
    t1 = np.log(Q) + s1 / Pf                             # (sum_k p_k log(Q p_k)) / P
    t2 = logP + s2 / Pf                                  # (sum_k p_k log(P q_k)) / P
    kl = t1 - t2
    # Every term of both reference sums is >= 0 for integer counts, so t1, t2 are the
    # sums of |terms| / P. Rounding in the reference (n sequential adds, Q_sum's n adds,
    # libm's <1 ulp log) and here is bounded, to first order, by (n + 8) u (1 + t1 + t2).
    tol = _TOL_SAFETY * (n + 16) * _EPS * (1.0 + np.abs(t1) + np.abs(t2) + np.abs(kl))
    return kl, tol


def _seq_sum(t: np.ndarray):
    """``s = 0; for x in t: s += x`` (strictly left to right), as the reference does."""
    if t.size == 0:
        return 0
    return np.add.accumulate(t)[-1]


def _exact_kl(h: np.ndarray, C: np.ndarray, NZ: np.ndarray, i: int, R: int) -> float:
    """The reference's KL divergence for threshold ``i``, with its operations and order."""
    P = int(C[-1])
    Pf = float(P)
    if R > i:                                            # m = 0: one block [0, i), as R=1
        R = 1
    hi = h[:i]
    p = hi.astype(np.float64)
    p[i - 1] += float(P - int(C[i]))                     # reference_distr_P[i-1] += outliers
    starts, ends = _blocks(np.array([i], dtype=np.int64), R)
    quant = C[ends[0]] - C[starts[0]]
    cnt = NZ[ends[0]] - NZ[starts[0]]
    m = i // R
    blk = np.minimum(np.arange(i) // m, R - 1) if m > 0 else np.full(i, R - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        qb = quant / np.where(cnt > 0, cnt, 1).astype(np.float64)   # quant / (cnt + 0.0)
    nz = hi != 0
    q = np.where(nz, qb[blk], 0.0)                       # expand_quantized_bins
    Q_sum = sum(q.tolist())                              # builtin sum, like the reference
    pn = p[nz]
    args1 = (Q_sum * pn).tolist()
    l1 = np.fromiter(map(math.log, args1), dtype=np.float64, count=len(args1))
    used = np.unique(blk[nz])
    lq = np.zeros(R, dtype=np.float64)
    lq[used] = [math.log(v) for v in (Pf * qb[used]).tolist()]   # log(P_sum * q_idx)
    l2 = lq[blk[nz]]
    tmp1 = _seq_sum(pn * l1)
    tmp2 = _seq_sum(pn * l2)
    return (tmp1 - tmp2) / Pf


def kl_divergences_exact(hist, bits: int = 8) -> dict[int, float]:
    """Reference KL value for every evaluated threshold ``i`` (for tests and diagnosis)."""
    h = _as_counts(np.asarray(hist))
    if h is None:
        raise ValueError("hist must hold non-negative integer counts")
    n, R = h.shape[0], 2 ** (bits - 1) - 1
    C = np.concatenate(([0], np.cumsum(h)))
    NZ = np.concatenate(([0], np.cumsum(h != 0)))
    return {i: _exact_kl(h, C, NZ, i, R)
            for i in range(int((n - 1) * 0.5), n) if h[i - 1] != 0}


# --------------------------------------------------------------------------- histogram
_BLOCK = 1 << 16                           # elements per inner step (fits in L2)
_CHUNK = 1 << 20                           # elements per thread task
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _workers() -> int:
    try:
        return max(1, min(4, len(os.sched_getaffinity(0))))
    except (AttributeError, OSError):
        return max(1, min(4, os.cpu_count() or 1))


def _map(fn, items: list) -> list:
    """``[fn(x) for x in items]``, on a small thread pool when there is more than one core
    (numpy releases the GIL in the per-block work, except in ``bincount``)."""
    global _pool
    if len(items) < 2 or _workers() < 2:
        return [fn(x) for x in items]
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_workers(), thread_name_prefix="edgeforge-hist")
    return list(_pool.map(fn, items))


def _f32_ceil(e: np.ndarray) -> np.ndarray:
    """Smallest float32 >= e (elementwise): for a float32 x, x >= e  <=>  x >= _f32_ceil(e)."""
    with np.errstate(over="ignore"):
        t = e.astype(np.float32)
    up, down = np.float32(np.inf), np.float32(-np.inf)
    for _ in range(2):
        t = np.where(t.astype(np.float64) < e, np.nextafter(t, up), t)
        lower = np.nextafter(t, down)
        t = np.where(lower.astype(np.float64) >= e, lower, t)
    return t


class _Plan:
    """How to histogram one tensor's |values| on fixed edges with the fast kernel."""

    __slots__ = ("x", "n", "scale", "shift", "t_lo", "e0", "en")

    def __init__(self, x, n, scale, shift, t_lo, e0, en):
        self.x, self.n, self.scale, self.shift, self.t_lo = x, n, scale, shift, t_lo
        self.e0, self.en = e0, en


def _plan(values: np.ndarray, edges: np.ndarray):
    """A :class:`_Plan`, or None when numpy itself must decide (any doubt)."""
    if values.dtype != np.float32 or edges.ndim != 1 or edges.dtype != np.float64 \
            or edges.size < 2 or values.size == 0:
        return None
    e0, en = float(edges[0]), float(edges[-1])
    n = edges.size - 1
    span = en - e0
    if not (math.isfinite(e0) and math.isfinite(en) and span > 0):
        return None
    # The estimate y below is within 2**-22 * n * (ratio + 1) of exact: keep that <= 1/4.
    if n * (max(abs(e0), abs(en)) / span + 1.0) > 2.0 ** 20:
        return None
    if not bool(np.all(np.diff(edges) > 0)):
        return None
    # evenly spaced (np.histogram / linspace edges), to 1e-6 of a bin
    if float(np.max(np.abs((edges - e0) * (n / span) - np.arange(n + 1)))) > 1e-6:
        return None
    x = values.reshape(-1)
    # Values outside the edges (or NaN) are detected per chunk, in _chunk.
    # Bin k holds t[k] <= |x| < t[k+1] (t: float32 images of the edges), the last bin also
    # |x| == t[n]. y = |x| * scale + shift is within 1/4 of the exact (|x| - e0) n / span + 1/2
    # (one float32 rounding each of scale, shift, the product and the sum, all bounded by the
    # ratio test above), so trunc(y) is the true bin k or k + 1, and a single comparison with
    # t[trunc(y)] settles it. t_lo[n] = inf sends |x| == edges[-1] (estimate n) to bin n - 1.
    t_lo = _f32_ceil(edges)
    t_lo[n] = np.inf
    return _Plan(x, n, np.float32(n / span), np.float32(0.5 - e0 * (n / span)), t_lo, e0, en)


def _chunk(task) -> np.ndarray | None:
    """Counts for ``plan.x[start:stop]``; None (numpy decides) if a value lies outside the
    edges or is NaN."""
    plan, start, stop = task
    n, scale, shift, t_lo = plan.n, plan.scale, plan.shift, plan.t_lo
    lo, hi = plan.x[start:stop].min(), plan.x[start:stop].max()   # NaN propagates
    if math.isnan(lo) or math.isnan(hi) or max(float(hi), -float(lo)) > plan.en:
        return None                               # something above the last edge
    e0 = plan.e0
    if e0 > 0 and ((lo >= 0 and float(lo) < e0) or (hi <= 0 and -float(hi) < e0)):
        return None                               # something below the first edge
    # With both signs present, a |x| below edges[0] is not ruled out above; it ends up with
    # a negative bin index, which bincount refuses (ValueError) -> numpy decides.
    out = np.zeros(n, dtype=np.intp)
    a = np.empty(_BLOCK, np.float32)
    y = np.empty(_BLOCK, np.float32)
    j32 = np.empty(_BLOCK, np.int32)
    j = np.empty(_BLOCK, np.intp)
    m = np.empty(_BLOCK, np.bool_)
    try:
        for s in range(start, stop, _BLOCK):
            src = plan.x[s:min(s + _BLOCK, stop)]
            k = src.size
            aa, yy, jj32, jj, mm = a[:k], y[:k], j32[:k], j[:k], m[:k]
            np.abs(src, out=aa)
            np.multiply(aa, scale, out=yy)
            np.add(yy, shift, out=yy)
            jj32[...] = yy                         # trunc (float32 -> int32 is the fast cast)
            jj[...] = jj32
            np.less(aa, t_lo[jj], out=mm)          # one step down where |x| < edge[j]
            np.subtract(jj, mm, out=jj)
            out += np.bincount(jj, minlength=n)    # ValueError on a negative index
    except (ValueError, IndexError):
        return None
    return out


def _abs_histograms(pairs: list) -> list:
    """``[np.histogram(np.abs(v), bins=e)[0] for v, e in pairs]``, the same int64 counts."""
    plans = [_plan(np.asarray(v), np.asarray(e)) for v, e in pairs]
    tasks, owner = [], []
    for idx, plan in enumerate(plans):
        if plan is None:
            continue
        size = plan.x.size
        for start in range(0, size, _CHUNK):
            tasks.append((plan, start, min(start + _CHUNK, size)))
            owner.append(idx)
    results: list = [None] * len(pairs)
    failed = set()
    for idx, counts in zip(owner, _map(_chunk, tasks)):
        if counts is None:
            failed.add(idx)
        elif results[idx] is None:
            results[idx] = counts
        else:
            results[idx] += counts
    for idx, (v, e) in enumerate(pairs):
        if plans[idx] is None or idx in failed:
            results[idx] = np.histogram(np.abs(v), bins=e)[0]
    return results


def abs_histogram(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``np.histogram(np.abs(values), bins=edges)[0]``: the same int64 counts, ~15x faster.

    Bin k holds ``edges[k] <= |x| < edges[k+1]`` (the last bin closed); values outside the
    edges or NaN are not counted, exactly as numpy's (sorting) path for an array of edges.
    The fast path needs float32 values and evenly spaced float64 edges much wider apart than
    float32 resolution (Paddle PTQ's: 2048 bins over the same data's |min|..|max|); anything
    else, or any value outside the edges, is left to numpy itself. ``values`` is not modified.
    """
    return _abs_histograms([(values, edges)])[0]


def _abs_min_max(values: np.ndarray) -> tuple[float, float]:
    """``(float(np.min(np.abs(v))), float(np.max(np.abs(v))))`` without a full |v| copy."""
    if values.dtype.kind != "f" or values.dtype.itemsize not in (4, 8):
        a = np.abs(values)
        return float(np.min(a)), float(np.max(a))
    x = values.reshape(-1)
    lo, hi = x.min(), x.max()
    if math.isnan(lo) or math.isnan(hi):
        a = np.abs(values)
        return float(np.min(a)), float(np.max(a))
    if lo >= 0:                                   # abs() also turns -0.0 into 0.0
        return float(abs(lo)), float(abs(hi))
    if hi <= 0:
        return float(abs(hi)), float(abs(lo))
    step = _BLOCK * 4                             # both signs: min |x| block by block
    buf = np.empty(min(step, x.size), x.dtype)
    amin = math.inf
    for s in range(0, x.size, step):
        part = x[s:s + step]
        amin = min(amin, float(np.abs(part, out=buf[:part.size]).min()))
    return amin, float(max(hi, -lo))


# ------------------------------------------------- exact histograms in Paddle's C++ histogram kernel
# Paddle's CPU ``histogram`` kernel (phi HistogramKernel, float64 input, float attrs min/max) counts
# x in bin trunc((x - min) * bins / (max - min)) (clamped to bins - 1) when min <= x <= max, in double
# arithmetic, in one fused C++ loop (~1.5 ns/element against ~3.7 for the numpy kernel above). For
# float32 activations and Paddle PTQ's edges this is *exactly* np.histogram's answer, by the
# argument in :func:`_kernel_plan`; a one-time probe (:func:`_kernel_ok`) checks the installed binary
# against numpy on values placed on and next to edges, and any doubt falls back to the numpy kernel.
_PD_BLOCK = 1 << 18                        # float64 elements per kernel call (2 MiB buffer)
_kernel_state: dict = {}
_plan_cache: dict = {}                     # id(edges) -> (edges, plan): PTQ reuses one array per var


def _kernel_bin(x: np.ndarray, e0: float, en: float, n: int) -> np.ndarray:
    """The kernel's bin for float64 ``x`` in [e0, en], before its clamp to n - 1: the same IEEE
    double operations in the same order, ``(int64)((x - min) * nbins / (max - min))``."""
    return np.trunc(((x - e0) * float(n)) / (en - e0))


def _kernel_plan(values: np.ndarray, edges: np.ndarray):
    """``(e0, en, n)`` when Paddle's kernel on float64(|values|) with ``min=e0, max=en, bins=n``
    gives exactly ``np.histogram(np.abs(values), bins=edges)[0]``, else None.

    For float32 values numpy's bin k is ``t[k] <= |x| < t[k+1]`` (the last bin also
    ``|x| == en``), t = the smallest float32 >= each edge, values outside [e0, en] dropped; the
    kernel keeps e0 <= |x| <= en (the same set when e0, en are float32 values) and its bin is
    monotone in |x|. So the two agree on *every* float32 input iff, for each k in 1..n-1, the
    kernel puts t[k] in a bin >= k and the float32 just below t[k] (when >= e0) in a bin < k:
    2(n - 1) evaluations, checked here with the kernel's own double arithmetic.
    """
    if values.dtype != np.float32 or edges.dtype != np.float64 or edges.ndim != 1 \
            or edges.size < 2 or values.size == 0:
        return None
    n = edges.size - 1
    e0, en = float(edges[0]), float(edges[-1])
    if not (math.isfinite(e0) and math.isfinite(en) and 0.0 <= e0 < en):
        return None
    if float(np.float32(e0)) != e0 or float(np.float32(en)) != en:
        return None                               # the kernel's min/max attributes are float32
    hit = _plan_cache.get(id(edges))
    if hit is not None and hit[0] is edges:
        return hit[1]
    plan = None
    if bool(np.all(np.diff(edges) >= 0)):
        t = _f32_ceil(edges[1:n])
        below = np.nextafter(t, np.float32(-np.inf))
        k = np.arange(1, n, dtype=np.float64)
        with np.errstate(all="ignore"):
            at = _kernel_bin(t.astype(np.float64), e0, en, n)
            under = _kernel_bin(below.astype(np.float64), e0, en, n)
        if bool(np.all(at >= k)) and bool(np.all((below.astype(np.float64) < e0) | (under < k))):
            plan = (e0, en, n)
    if len(_plan_cache) > 4096:
        _plan_cache.clear()
    _plan_cache[id(edges)] = (edges, plan)
    return plan


def _kernel_histograms(items: list) -> list:
    """Paddle's histogram kernel over float64 copies of |x| taken block by block.
    ``items``: ``[(flat float32 array, e0, en, n)]``; returns int64 counts."""
    import paddle                                     # noqa: PLC0415
    from paddle import _C_ops                         # noqa: PLC0415

    out = []
    buf = np.empty(min(_PD_BLOCK, max(x.size for x, *_ in items)), np.float64)
    with paddle.base.dygraph.guard(paddle.CPUPlace()):
        for x, e0, en, n in items:
            acc = np.zeros(n, np.int64)
            for s in range(0, x.size, buf.size):
                src = x[s:s + buf.size]
                b = buf[:src.size]
                np.abs(src, out=b)                     # exact: float32 -> float64, |.|
                h = _C_ops.histogram(paddle.Tensor(b, zero_copy=True), None, n, e0, en, False)
                acc += h.numpy()
            out.append(acc)
    return out


def _kernel_ok() -> bool:
    """Whether the installed Paddle's kernel agrees with numpy on a probe set built to break any
    other arithmetic: values on, one float32 step below and above every edge, the extremes,
    outside values and NaN, for edges from [0, m] and [m0, m] ranges as Paddle PTQ builds them."""
    if "ok" in _kernel_state:
        return _kernel_state["ok"]
    ok = False
    try:
        rng = np.random.default_rng(12345)
        ok = True
        for lo, hi, n in ((0.0, 6.0, 2048), (0.0, 3.1234567, 2048), (1.0e-3, 17.77, 2048),
                          (0.37, 0.3700731, 2048), (0.0, 1.0e-30, 2048), (2.5, 1000.3, 64)):
            lo32, hi32 = float(np.float32(lo)), float(np.float32(hi))
            _, edges = np.histogram([], bins=n, range=(lo32, hi32))
            t = _f32_ceil(edges)
            near = np.concatenate([t, np.nextafter(t, np.float32(np.inf)),
                                   np.nextafter(t, np.float32(-np.inf)), edges.astype(np.float32)])
            body = (rng.random(200_000) * (hi32 - lo32) + lo32).astype(np.float32)
            x = np.concatenate([near, body, np.float32([0.0, -0.0, np.nan, np.inf, hi32 * 2])])
            x = x * np.where(rng.random(x.size) < 0.5, 1, -1).astype(np.float32)
            plan = _kernel_plan(x, edges)
            if plan is None:
                continue
            got = _kernel_histograms([(x, *plan)])[0]
            want = np.histogram(np.abs(x), bins=edges)[0]
            if not (got.dtype == want.dtype and np.array_equal(got, want)):
                ok = False
                break
    except Exception:                              # no eager mode, other signature, ...
        ok = False
    _kernel_state["ok"] = ok
    return ok


def _abs_histograms_fast(pairs: list) -> list:
    """:func:`_abs_histograms` (same counts), through Paddle's kernel where provably exact."""
    plans = [_kernel_plan(np.asarray(v), np.asarray(e)) for v, e in pairs]
    use = [i for i, p in enumerate(plans) if p is not None]
    results: list = [None] * len(pairs)
    if use and _kernel_ok():
        counts = _kernel_histograms([(np.asarray(pairs[i][0]).reshape(-1), *plans[i]) for i in use])
        for i, c in zip(use, counts):
            results[i] = c
    rest = [i for i, r in enumerate(results) if r is None]
    if rest:
        for i, c in zip(rest, _abs_histograms([pairs[i] for i in rest])):
            results[i] = c
    return results


# ----------------------------------------------------------------- Paddle PTQ sampling stage
class _Capsule:
    """Hands a DLPack capsule to ``np.from_dlpack`` (numpy wants an object with __dlpack__)."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)                             # kDLCPU


def _read_activation(scope, var_name: str, utils) -> np.ndarray:
    """The variable's data as a read-only numpy view (no copy) where Paddle can share it,
    else Paddle's own copy (``utils.load_variable_data``). Same values either way."""
    var = scope.find_var(var_name)
    if var is not None:
        try:
            view = np.from_dlpack(_Capsule(var.get_tensor()._to_dlpack()))
            return view.reshape(1) if view.shape == () else view
        except Exception:                         # dtype numpy lacks, non-CPU place, ...
            pass
    return utils.load_variable_data(scope, var_name)


# The preparation pass of KL/hist runs the program on every batch once more in the sampling pass,
# only to see the same activations again. fast_kl() keeps them instead, within a memory budget:
# after a batch's abs min/max are taken, each activation's buffer is handed over from the scope to a
# read-only numpy view (DLPack shares the allocation; the scope's tensor is cleared, so the next run
# allocates a fresh one and the kept data is never overwritten). A kept batch is used in place of a
# rerun only if the loader yields a bitwise-equal feed for it in the sampling pass; the program
# (inference, fixed weights) then computes the same activations, as Paddle's CPU kernels are
# deterministic for equal inputs. Anything else (other feed types, a budget too small, a tensor
# that cannot be shared) reruns the program exactly as Paddle does.
_keep_limit: int | None = None             # bytes; None: a quarter of the available memory


def _keep_budget() -> int:
    if _keep_limit is not None:
        return max(0, int(_keep_limit))
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 4
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _snapshot_feed(data):
    """A private copy of a ``{name: ndarray}`` feed, or None for any other feed."""
    if not isinstance(data, dict) or not data:
        return None
    snap = {}
    for key, value in data.items():
        if not isinstance(key, str) or type(value) is not np.ndarray or value.dtype.hasobject:
            return None
        snap[key] = value.copy()
    return snap


def _same_feed(snap, data) -> bool:
    if not isinstance(data, dict) or data.keys() != snap.keys():
        return False
    for key, value in data.items():
        old = snap[key]
        if type(value) is not np.ndarray or value.dtype != old.dtype or value.shape != old.shape \
                or value.tobytes() != old.tobytes():
            return False
    return True


def _keep_activations(self, data, budget: int, utils):
    """``(feed copy, {var_name: read-only view}, bytes)`` for the batch now in the scope, taking
    the activations' buffers over from the scope, or None (nothing is taken) when the feed is not
    a plain ``{name: ndarray}``, a buffer cannot be shared, or the batch exceeds ``budget``."""
    if budget <= 0:
        return None
    feed = _snapshot_feed(data)
    if feed is None:
        return None
    views, tensors, nbytes = {}, [], 0
    for var_name in self._quantized_act_var_name:
        var = self._scope.find_var(var_name)
        if var is None:
            return None
        try:
            tensor = var.get_tensor()
            view = np.from_dlpack(_Capsule(tensor._to_dlpack()))
        except Exception:                          # empty, non-CPU, dtype numpy lacks, ...
            return None
        view = view.reshape(1) if view.shape == () else view
        view.flags.writeable = False
        nbytes += view.nbytes
        if nbytes > budget:
            return None
        views[var_name] = view
        tensors.append(tensor)
    for tensor in tensors:
        tensor._clear()                            # the view now owns the data
    return feed, views, nbytes


# The PostTrainingQuantization methods are replaced only while their source is exactly the one
# the replacements below mirror (Paddle 3.3); otherwise Paddle's own stay in place. quantize() is
# replaced only together with the other two.
_ORIGINAL_SOURCES = {
    "_sample_histogram": '''\
def _sample_histogram(self):
    for var_name in self._quantized_act_var_name:
        var_tensor = utils.load_variable_data(self._scope, var_name)
        if (var_tensor.size == 0) or (
            var_name not in self._sampling_act_histogram
        ):
            self._zero_size_var_names.add(var_name)
            continue
        var_tensor_abs = np.abs(var_tensor)
        bins = self._sampling_act_histogram[var_name][1]
        hist, _ = np.histogram(var_tensor_abs, bins=bins)
        self._sampling_act_histogram[var_name][0] += hist
''',
    "_collect_activation_abs_min_max": """\
def _collect_activation_abs_min_max(self):
    '''
    Collect the abs_min and abs_max for all activation. When algo = KL,
    get the min and max value, and then calculate the threshold.
    '''
    for var_name in self._quantized_act_var_name:
        var_tensor = utils.load_variable_data(self._scope, var_name)
        if var_tensor.size == 0:
            self._zero_size_var_names.add(var_name)
            continue
        var_tensor = np.abs(var_tensor)
        min_value = float(np.min(var_tensor))
        max_value = float(np.max(var_tensor))
        if var_name not in self._sampling_act_abs_min_max:
            self._sampling_act_abs_min_max[var_name] = [
                min_value,
                max_value,
            ]
        else:
            if min_value < self._sampling_act_abs_min_max[var_name][0]:
                self._sampling_act_abs_min_max[var_name][0] = min_value
            if max_value > self._sampling_act_abs_min_max[var_name][1]:
                self._sampling_act_abs_min_max[var_name][1] = max_value
""",
    "quantize": """\
def quantize(self):
    '''
    Load the FP32 model, and use the calibrate data to calculate the forward-stage.
    Based on the sample data, we can get the quantization information, and obtain
    the final quantized model.

    Args:
        None
    Returns:
        the program of quantized model.
    '''
    self._load_model_data()
    self._collect_target_varnames()
    self._set_activation_persistable()

    if self._algo in ["KL", "hist"]:
        batch_id = 0
        with tqdm(
            total=self._batch_nums,
            bar_format='Preparation stage, Run batch:|{bar}| {n_fmt}/{total_fmt}',
            ncols=80,
        ) as t:
            for data in self._data_loader():
                self._executor.run(
                    program=self._program,
                    feed=data,
                    fetch_list=self._fetch_list,
                    return_numpy=False,
                    scope=self._scope,
                )
                self._collect_activation_abs_min_max()
                batch_id += 1
                t.update()
                if self._batch_nums and batch_id >= self._batch_nums:
                    break
        self._init_sampling_act_histogram()

    batch_id = 0
    with tqdm(
        total=self._batch_nums,
        bar_format='Sampling stage, Run batch:|{bar}| {n_fmt}/{total_fmt}',
        ncols=80,
    ) as t:
        for data in self._data_loader():
            self._executor.run(
                program=self._program,
                feed=data,
                fetch_list=self._fetch_list,
                return_numpy=False,
                scope=self._scope,
            )
            self._sampling()
            batch_id += 1
            t.update()
            if self._batch_nums and batch_id >= self._batch_nums:
                break

    if self._algo == 'avg':
        for var_name in self._quantized_act_var_name:
            if var_name not in self._quantized_var_avg:
                continue
            self._quantized_threshold[var_name] = np.array(
                self._quantized_var_avg[var_name]
            ).mean()

    if self._algo in ["KL", "hist"]:
        self._calculate_kl_hist_threshold()

    if self._round_type == 'adaround':
        self._adaround_apply()

    self._reset_activation_persistable()

    if self._algo == 'min_max':
        self._save_input_threshold()
    else:
        self._update_program()

    # save out_threshold for quantized ops.
    if not self.FLAG:
        self._save_output_threshold()

    if any(
        op_type in self.quant_config.activation_quant_operation_types
        for op_type in self._dynamic_quantize_op_type
    ):
        self._collect_dynamic_quantize_op_threshold(
            self._dynamic_quantize_op_type
        )

    utils.move_persistable_var_to_global_block(self._program)

    if not self._return_graph:
        return self._program
    else:
        main_graph = IrGraph(core.Graph(self._program.desc), for_test=True)
        return main_graph
""",
}


def _make_fast_methods(ptq_module) -> dict[str, Callable]:
    utils = ptq_module.utils
    tqdm = ptq_module.tqdm
    IrGraph, core = ptq_module.IrGraph, ptq_module.core

    def _histograms_from(self, read):
        """``_sample_histogram``'s work on the activations ``read(var_name)`` returns."""
        todo = []
        for var_name in self._quantized_act_var_name:
            var_tensor = read(var_name)
            if (var_tensor.size == 0) or (var_name not in self._sampling_act_histogram):
                self._zero_size_var_names.add(var_name)
                continue
            todo.append((var_name, var_tensor))
        hists = _abs_histograms_fast(
            [(t, self._sampling_act_histogram[name][1]) for name, t in todo])
        for (var_name, _), hist in zip(todo, hists):
            self._sampling_act_histogram[var_name][0] += hist

    def _sample_histogram(self):
        _histograms_from(self, lambda name: _read_activation(self._scope, name, utils))

    def _collect_activation_abs_min_max(self):
        todo = []
        for var_name in self._quantized_act_var_name:
            var_tensor = _read_activation(self._scope, var_name, utils)
            if var_tensor.size == 0:
                self._zero_size_var_names.add(var_name)
                continue
            todo.append((var_name, var_tensor))
        extremes = _map(_abs_min_max, [t for _, t in todo])
        for (var_name, _), (min_value, max_value) in zip(todo, extremes):
            if var_name not in self._sampling_act_abs_min_max:
                self._sampling_act_abs_min_max[var_name] = [min_value, max_value]
            else:
                if min_value < self._sampling_act_abs_min_max[var_name][0]:
                    self._sampling_act_abs_min_max[var_name][0] = min_value
                if max_value > self._sampling_act_abs_min_max[var_name][1]:
                    self._sampling_act_abs_min_max[var_name][1] = max_value

    def quantize(self):
        # Paddle 3.3's quantize(), but for KL/hist the preparation pass keeps each batch's
        # activations (zero-copy: the scope hands its buffers over, see _keep_activations) within
        # the memory budget, and the sampling pass histograms a kept batch instead of running the
        # program on it again when the loader yields the very same feed (bitwise) for it.
        self._load_model_data()
        self._collect_target_varnames()
        self._set_activation_persistable()

        kept: dict = {}
        if self._algo in ["KL", "hist"]:
            budget = _keep_budget()
            batch_id = 0
            with tqdm(
                total=self._batch_nums,
                bar_format='Preparation stage, Run batch:|{bar}| {n_fmt}/{total_fmt}',
                ncols=80,
            ) as t:
                for data in self._data_loader():
                    self._executor.run(
                        program=self._program,
                        feed=data,
                        fetch_list=self._fetch_list,
                        return_numpy=False,
                        scope=self._scope,
                    )
                    self._collect_activation_abs_min_max()
                    entry = _keep_activations(self, data, budget, utils)
                    if entry is not None:
                        kept[batch_id] = entry
                        budget -= entry[2]
                    batch_id += 1
                    t.update()
                    if self._batch_nums and batch_id >= self._batch_nums:
                        break
            self._init_sampling_act_histogram()

        batch_id = 0
        with tqdm(
            total=self._batch_nums,
            bar_format='Sampling stage, Run batch:|{bar}| {n_fmt}/{total_fmt}',
            ncols=80,
        ) as t:
            for data in self._data_loader():
                entry = kept.pop(batch_id, None)
                if entry is not None and _same_feed(entry[0], data):
                    _histograms_from(self, entry[1].__getitem__)
                else:
                    self._executor.run(
                        program=self._program,
                        feed=data,
                        fetch_list=self._fetch_list,
                        return_numpy=False,
                        scope=self._scope,
                    )
                    self._sampling()
                del entry
                batch_id += 1
                t.update()
                if self._batch_nums and batch_id >= self._batch_nums:
                    break
        kept.clear()

        if self._algo == 'avg':
            for var_name in self._quantized_act_var_name:
                if var_name not in self._quantized_var_avg:
                    continue
                self._quantized_threshold[var_name] = np.array(
                    self._quantized_var_avg[var_name]
                ).mean()

        if self._algo in ["KL", "hist"]:
            self._calculate_kl_hist_threshold()

        if self._round_type == 'adaround':
            self._adaround_apply()

        self._reset_activation_persistable()

        if self._algo == 'min_max':
            self._save_input_threshold()
        else:
            self._update_program()

        # save out_threshold for quantized ops.
        if not self.FLAG:
            self._save_output_threshold()

        if any(
            op_type in self.quant_config.activation_quant_operation_types
            for op_type in self._dynamic_quantize_op_type
        ):
            self._collect_dynamic_quantize_op_threshold(
                self._dynamic_quantize_op_type
            )

        utils.move_persistable_var_to_global_block(self._program)

        if not self._return_graph:
            return self._program
        else:
            main_graph = IrGraph(core.Graph(self._program.desc), for_test=True)
            return main_graph

    fns = {"_sample_histogram": _sample_histogram,
           "_collect_activation_abs_min_max": _collect_activation_abs_min_max,
           "quantize": quantize}
    for fn in fns.values():
        fn.__edgeforge_fast__ = True
    return fns


def _source_matches(fn, expected: str) -> bool:
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    return inspect.cleandoc("\n" + src).strip() == expected.strip()


# --------------------------------------------------------------------------- public API
def cal_kl_threshold_fast(hist, bin_width, bits):
    """Drop-in for Paddle's ``cal_kl_threshold(hist, bin_width, bits)``: same threshold.

    Args:
        hist (np.ndarray): 1-D histogram of |activation| (Paddle passes int64 counts).
        bin_width (float): width of one bin.
        bits (int): quantization bits (8 -> 127 levels).

    Returns:
        ``(min_kl_index + 0.5) * bin_width``, the same expression and value as the reference.
    """
    arr = hist if isinstance(hist, np.ndarray) else np.asarray(hist)
    assert arr.ndim == 1
    n = arr.shape[0]
    R = 2 ** (bits - 1) - 1 if isinstance(bits, (int, np.integer)) else None
    h = _as_counts(arr) if (R is not None and R >= 1 and n >= 3) else None
    if h is None:
        return _reference()(hist, bin_width, bits)

    starting_iter = int((n - 1) * 0.5)
    C = np.concatenate(([0], np.cumsum(h)))
    NZ = np.concatenate(([0], np.cumsum(h != 0)))
    I = np.arange(starting_iter, n, dtype=np.int64)
    I = I[h[I - 1] != 0]                                 # `if reference_distr_P[i-1] == 0: continue`

    min_kl_index = 0
    if I.size:
        kl, tol = _screen(h, C, NZ, I, R)
        bound = np.min(kl + tol)
        cand = I[kl - tol <= bound]
        if cand.size == 1:
            min_kl_index = int(cand[0])
        else:
            best = None
            for i in cand.tolist():                      # increasing i, first strict minimum
                v = _exact_kl(h, C, NZ, i, R)
                if best is None or v < best:
                    best, min_kl_index = v, i
    if min_kl_index == 0:
        while starting_iter > 0:
            if arr[starting_iter] == 0:
                starting_iter -= 1
                continue
            break
        min_kl_index = starting_iter
    return (min_kl_index + 0.5) * bin_width


# --------------------------------------------------------------------------- patching
def install(sampling: bool = True, keep_bytes: int | None = None) -> None:
    """Make Paddle's PTQ use :func:`cal_kl_threshold_fast`; with ``sampling=True`` also its
    KL/hist sampling stage (abs min/max and histograms) uses the fast, identical helpers, and
    the sampling pass reuses the preparation pass's activations instead of running the program
    again, for as many batches as fit in ``keep_bytes`` (None: a quarter of the available memory;
    0: always rerun, as Paddle does). Re-entrant (the outermost call's settings hold); undone
    by :func:`uninstall`."""
    global _install_depth, _keep_limit
    import importlib

    if _install_depth == 0:
        _keep_limit = keep_bytes
        for name in _PATCH_SITES:
            try:
                mod = importlib.import_module(name)
            except Exception:                            # optional site (older/newer Paddle)
                continue
            current = getattr(mod, "cal_kl_threshold", None)
            if current is None or current is cal_kl_threshold_fast:
                continue
            _originals[name] = current
            mod.cal_kl_threshold = cal_kl_threshold_fast
        if sampling:
            ptq = importlib.import_module("paddle.static.quantization.post_training_quantization")
            cls = ptq.PostTrainingQuantization
            fast_methods = _make_fast_methods(ptq)
            current = {name: cls.__dict__.get(name) for name in fast_methods}
            matches = {name: fn is not None and _source_matches(fn, _ORIGINAL_SOURCES[name])
                       for name, fn in current.items()}
            if not (matches["_sample_histogram"] and matches["_collect_activation_abs_min_max"]):
                matches["quantize"] = False     # its kept batches go through our histogram path
            for name, fast in fast_methods.items():
                if matches[name]:
                    _original_methods[name] = current[name]
                    setattr(cls, name, fast)
    _install_depth += 1


def uninstall() -> None:
    """Undo :func:`install` (the outermost call restores Paddle's functions)."""
    global _install_depth
    import sys

    if _install_depth == 0:
        return
    _install_depth -= 1
    if _install_depth:
        return
    for name, fn in list(_originals.items()):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "cal_kl_threshold", None) is cal_kl_threshold_fast:
            mod.cal_kl_threshold = fn
    _originals.clear()
    ptq = sys.modules.get("paddle.static.quantization.post_training_quantization")
    for name, fn in list(_original_methods.items()):
        cls = ptq.PostTrainingQuantization if ptq is not None else None
        if cls is not None and getattr(cls.__dict__.get(name), "__edgeforge_fast__", False):
            setattr(cls, name, fn)
    _original_methods.clear()
    _plan_cache.clear()


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    return _install_depth > 0


@contextlib.contextmanager
def fast_kl(sampling: bool = True, keep_bytes: int | None = None):
    """Within the block, Paddle PTQ with ``algo="KL"`` picks thresholds with
    :func:`cal_kl_threshold_fast` and (``sampling=True``) collects its abs min/max and
    histograms with the fast helpers and skips rerunning the program on batches it could keep
    (``keep_bytes``, see :func:`install`); results are identical to Paddle's own."""
    install(sampling=sampling, keep_bytes=keep_bytes)
    try:
        yield
    finally:
        uninstall()
