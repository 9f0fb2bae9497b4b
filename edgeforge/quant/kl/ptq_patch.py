"""Installing the fast paths into Paddle, and saying whether they took.

The threshold search is always patched in (it needs no guard: it is called with a histogram
and returns a float). The sampling methods of ``PostTrainingQuantization`` are replaced only
while Paddle's source hashes to the one they mirror (:mod:`.ptq_source`); otherwise Paddle's own stay
and KL calibration runs at Paddle's speed (tens of times slower on real models).
:func:`status` says which happened, so a build can record it instead of slowing down silently.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
from typing import Callable

from .histogram import plan_cache
from .ptq_methods import DEGENERATE, make_fast_methods, set_keep_limit
from .ptq_source import ORIGINAL_DIGESTS, source_digest
from .threshold import PATCH_SITES, originals, cal_kl_threshold_fast

_PTQ_MODULE = "paddle.static.quantization.post_training_quantization"
_original_methods: dict[str, Callable] = {}  # PostTrainingQuantization method -> original
_install_depth = 0
_status: dict = {"enabled": False, "reason": "not installed"}


def _patch_threshold() -> int:
    """Point every module that holds Paddle's ``cal_kl_threshold`` at the fast one."""
    patched = 0
    for name in PATCH_SITES:
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional site (older/newer Paddle)
            continue
        current = getattr(mod, "cal_kl_threshold", None)
        if current is None or current is cal_kl_threshold_fast:
            continue
        originals[name] = current
        mod.cal_kl_threshold = cal_kl_threshold_fast
        patched += 1
    return patched


def _patch_sampling() -> list[str]:
    """Replace the sampling methods whose source matches the guard; the names that did not."""
    ptq = importlib.import_module(_PTQ_MODULE)
    cls = ptq.PostTrainingQuantization
    fast_methods = make_fast_methods(ptq)
    current = {name: cls.__dict__.get(name) for name in fast_methods}
    matches = {name: fn is not None and source_digest(fn) == ORIGINAL_DIGESTS[name]
               for name, fn in current.items()}
    if not (matches["_sample_histogram"] and matches["_collect_activation_abs_min_max"]):
        matches["quantize"] = False     # its kept batches go through our histogram path
    for name, fast in fast_methods.items():
        if matches[name]:
            _original_methods[name] = current[name]
            setattr(cls, name, fast)
    return [name for name, ok in matches.items() if not ok]


def install(sampling: bool = True, keep_bytes: int | None = None) -> None:
    """Make Paddle's PTQ use :func:`cal_kl_threshold_fast`; with ``sampling=True`` also its
    KL/hist sampling stage (abs min/max and histograms) uses the fast, identical helpers, and
    the sampling pass reuses the preparation pass's activations instead of running the program
    again, for as many batches as fit in ``keep_bytes`` (None: a quarter of the available memory;
    0: always rerun, as Paddle does). Re-entrant (the outermost call's settings hold); undone
    by :func:`uninstall`."""
    global _install_depth, _status
    if _install_depth == 0:
        set_keep_limit(keep_bytes)
        DEGENERATE.clear()
        patched = _patch_threshold()
        off = _patch_sampling() if sampling else []
        if off:
            _status = {"enabled": False,
                       "reason": (f"Paddle's PostTrainingQuantization.{', .'.join(off)} differ from "
                                  "the Paddle 3.3 source the fast path mirrors: Paddle's own run "
                                  "(same result, much slower)")}
        elif not patched:
            _status = {"enabled": False, "reason": "Paddle has no cal_kl_threshold to replace"}
        else:
            _status = {"enabled": True,
                       "reason": "fast threshold search" + (" and sampling" if sampling else ""),
                       "degenerate_ranges": DEGENERATE}      # filled while PTQ samples
    _install_depth += 1


def uninstall() -> None:
    """Undo :func:`install` (the outermost call restores Paddle's functions)."""
    global _install_depth
    if _install_depth == 0:
        return
    _install_depth -= 1
    if _install_depth:
        return
    for name, fn in list(originals.items()):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "cal_kl_threshold", None) is cal_kl_threshold_fast:
            mod.cal_kl_threshold = fn
    originals.clear()
    ptq = sys.modules.get(_PTQ_MODULE)
    for name, fn in list(_original_methods.items()):
        cls = ptq.PostTrainingQuantization if ptq is not None else None
        if cls is not None and getattr(cls.__dict__.get(name), "__edgeforge_fast__", False):
            setattr(cls, name, fn)
    _original_methods.clear()
    plan_cache.clear()


def installed() -> bool:
    """Whether :func:`install` is in effect."""
    return _install_depth > 0


def status() -> dict:
    """``{"enabled": bool, "reason": str}`` for the latest :func:`install`: whether the fast
    paths took, and if not, why (a manifest records it)."""
    return dict(_status)


@contextlib.contextmanager
def fast_kl(sampling: bool = True, keep_bytes: int | None = None):
    """Within the block, Paddle PTQ with ``algo="KL"`` picks thresholds with
    :func:`cal_kl_threshold_fast` and (``sampling=True``) collects its abs min/max and
    histograms with the fast helpers and skips rerunning the program on batches it could keep
    (``keep_bytes``, see :func:`install`); results are identical to Paddle's own. Yields
    :func:`status`."""
    install(sampling=sampling, keep_bytes=keep_bytes)
    try:
        yield status()
    finally:
        uninstall()
