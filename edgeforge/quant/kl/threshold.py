"""The KL threshold search: :func:`cal_kl_threshold_fast`, bit for bit Paddle's choice.

See the package docstring (``edgeforge.quant.kl``) for the screen/refine argument.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

_EPS = np.finfo(np.float64).eps / 2        # unit roundoff u = 2**-53
_TOL_SAFETY = 8.0                          # the bound below is first-order; keep a wide margin

# Where Paddle looks the function up: the defining module, and modules that did
# ``from .cal_kl_threshold import cal_kl_threshold`` (a binding of their own).
PATCH_SITES = (
    "paddle.static.quantization.cal_kl_threshold",
    "paddle.static.quantization.post_training_quantization",
    "paddle.quantization.imperative.ptq_quantizer",
)
originals: dict[str, Callable] = {}       # module name -> the function it held before install()


# --------------------------------------------------------------------------- reference access
def _reference() -> Callable:
    """Paddle's own ``cal_kl_threshold`` (the original even while patched)."""
    orig = originals.get(PATCH_SITES[0])
    if orig is not None:
        return orig
    from paddle.static.quantization import cal_kl_threshold as mod

    fn = mod.cal_kl_threshold
    if fn is cal_kl_threshold_fast:            # patched by someone else: dig out the original
        raise RuntimeError("Paddle's cal_kl_threshold is patched but its original is unknown")
    return fn


# --------------------------------------------------------------------------- helpers
def as_counts(hist: np.ndarray):
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


def screen(h: np.ndarray, C: np.ndarray, NZ: np.ndarray, I: np.ndarray, R: int):
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


def exact_kl(h: np.ndarray, C: np.ndarray, NZ: np.ndarray, i: int, R: int) -> float:
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
    h = as_counts(np.asarray(hist))
    if h is None:
        raise ValueError("hist must hold non-negative integer counts")
    n, R = h.shape[0], 2 ** (bits - 1) - 1
    C = np.concatenate(([0], np.cumsum(h)))
    NZ = np.concatenate(([0], np.cumsum(h != 0)))
    return {i: exact_kl(h, C, NZ, i, R)
            for i in range(int((n - 1) * 0.5), n) if h[i - 1] != 0}


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
    h = as_counts(arr) if (R is not None and R >= 1 and n >= 3) else None
    if h is None:
        return _reference()(hist, bin_width, bits)

    starting_iter = int((n - 1) * 0.5)
    C = np.concatenate(([0], np.cumsum(h)))
    NZ = np.concatenate(([0], np.cumsum(h != 0)))
    I = np.arange(starting_iter, n, dtype=np.int64)
    I = I[h[I - 1] != 0]                                 # `if reference_distr_P[i-1] == 0: continue`

    min_kl_index = 0
    if I.size:
        kl, tol = screen(h, C, NZ, I, R)
        bound = np.min(kl + tol)
        cand = I[kl - tol <= bound]
        if cand.size == 1:
            min_kl_index = int(cand[0])
        else:
            best = None
            for i in cand.tolist():                      # increasing i, first strict minimum
                v = exact_kl(h, C, NZ, i, R)
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

