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
  float64 copies of |x| (block by block), where :func:`kernel_plan` proves, edge by edge with
  the kernel's double arithmetic, that its bins are numpy's for every float32 input (a one-time
  probe checks the installed binary); otherwise :func:`abs_histogram`, a numpy kernel with an
  O(1) bin estimate corrected against the float32 images of the edges. Same int64 counts.
* ``_collect_activation_abs_min_max``: the same floats, without a full |x| copy.
* ``quantize``: the preparation pass keeps each batch's activations (the scope hands its buffers
  over, zero-copy; bounded by ``keep_bytes``) and the sampling pass histograms a kept batch
  instead of running the program again, when the loader yields a bitwise-equal feed for it.
  Activations are read as zero-copy DLPack views throughout.

Layout: :mod:`.threshold` (the search), :mod:`.histogram` (the exact histogram kernels),
:mod:`.ptq_methods` (the replacement PTQ methods), :mod:`.ptq_source` (the guard: digests of
Paddle's source they mirror) and :mod:`.ptq_patch` (install/uninstall, and :func:`status`: whether the
fast paths took).
"""
from __future__ import annotations

from . import histogram, ptq_methods, ptq_patch, threshold
from .histogram import abs_histogram
from .ptq_patch import fast_kl, install, installed, status, uninstall
from .threshold import cal_kl_threshold_fast, kl_divergences_exact

# internals the unit tests check against Paddle's own code
from .histogram import (abs_histograms_fast, abs_min_max, f32_ceil,
                        kernel_histograms, kernel_ok, kernel_plan)
from .ptq_methods import keep_activations
from .threshold import as_counts, exact_kl, screen

__all__ = ["cal_kl_threshold_fast", "kl_divergences_exact", "abs_histogram",
           "fast_kl", "install", "uninstall", "installed", "status",
           "histogram", "ptq_methods", "ptq_patch", "threshold",
           "abs_histograms_fast", "abs_min_max", "f32_ceil", "kernel_histograms", "kernel_ok",
           "kernel_plan", "keep_activations", "as_counts", "exact_kl", "screen"]
