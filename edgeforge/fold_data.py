"""The user's data for a folded input (``[preprocess] fold = true``), and the right advice for a
data set whose dtype is not the model input's.

With ``fold = true`` the artifact takes the decoded image (uint8 ``[N, H, W, 3]``), but a
project often holds the model's float inputs (normalized, -2.1 to 2.6). Those are kept: mapped
back through the declared pipeline (layout, normalize, scale, channel order, inverted) when they
came from whole-number pixels, else, for a set without labels, the declared ``[preprocess]
images`` are decoded through the pipeline's decode/resize/crop. Where neither works, the error
names the fix that fits the values it saw (never ``astype('uint8')`` on normalized floats).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import ConfigError

INTEGRAL_TOL = 0.02       # how far from a whole number an inverted pixel may be (float32 rounding)


def unfolded_to_bytes(arr: np.ndarray, fold: dict) -> np.ndarray | None:
    """The uint8 NHWC images that ``fold``'s pre-processing turns into ``arr`` (float, the
    unfolded input's shape), or None when ``arr`` did not come from whole-number pixels 0-255."""
    want = fold["shape"]
    if arr.dtype.kind != "f" or arr.ndim != 4 or list(arr.shape[1:]) != list(want[1:]):
        return None
    x = np.asarray(arr, np.float64)
    if fold["layout"] == "NCHW":
        x = np.transpose(x, (0, 2, 3, 1))
    x = (x * np.asarray(fold["std"], np.float64) + np.asarray(fold["mean"], np.float64)) / float(fold["scale"])
    if fold["channel_order"] == "bgr":
        x = x[..., ::-1]
    px = np.rint(x)
    if not np.all(np.isfinite(x)) or px.min() < 0 or px.max() > 255 or np.max(np.abs(x - px)) > INTEGRAL_TOL:
        return None
    return np.ascontiguousarray(px.astype(np.uint8))


def images_to_bytes(folder: Path, steps: list[dict]) -> np.ndarray | None:
    """The declared images through the pipeline's decode, resize and crop: uint8 ``[N, H, W, 3]``
    (None without images)."""
    from PIL import Image

    from .runner.pipeline import run_pipeline
    from .task.parity import images

    paths = images(folder) if folder.is_dir() else []
    if not paths:
        return None
    geometry = [s for s in steps if s["op"] in ("decode", "resize", "resize_short", "crop")]
    out = []
    for p in paths:
        with Image.open(p) as img:
            out.append(np.rint(run_pipeline(img, geometry)).astype(np.uint8))
    return np.stack(out)


def describe_values(arr: np.ndarray) -> str:
    if arr.size == 0 or arr.dtype.kind not in "fiub":
        return ""
    lo, hi = float(np.min(arr)), float(np.max(arr))
    return f"values {lo:.3g} to {hi:.3g}"


def dtype_hint(arr: np.ndarray, dtype: str) -> str:
    """How to convert ``arr`` to ``dtype`` without changing what it means, for the values it
    holds: astype only where that keeps every value."""
    target = np.dtype(dtype)
    if target.kind == "f":
        return f"convert it with arr.astype('{dtype}')"
    if arr.size and arr.dtype.kind in "fiub":
        info = np.iinfo(target) if target.kind in "iu" else None
        a = np.asarray(arr, np.float64)
        whole = bool(np.all(np.isfinite(a)) and np.all(a == np.rint(a)))
        if info is not None and whole and a.min() >= info.min and a.max() <= info.max:
            return f"convert it with arr.astype('{dtype}') (its values are whole numbers in {dtype}'s range)"
        return (f"its {describe_values(arr)} are not {dtype} values: astype('{dtype}') would change them; "
                f"save the data as the model input takes it ({dtype})")
    return f"save the data as the model input takes it ({dtype})"


def folded_input(arr: np.ndarray, fold: dict, which: str, labelled: bool, images: Path,
                 steps: list[dict]) -> np.ndarray:
    """``arr`` (the data for the folded input, not uint8) as the artifact takes it, or a
    ConfigError naming the fix for the data seen."""
    mapped = unfolded_to_bytes(arr, fold)
    if mapped is not None:
        return mapped
    looks_unfolded = arr.dtype.kind == "f" and arr.ndim == 4 and list(arr.shape[1:]) == list(fold["shape"][1:])
    if looks_unfolded and not labelled:
        decoded = images_to_bytes(images, steps)
        if decoded is not None:
            return decoded
    h, w = fold["size"]
    if looks_unfolded:
        seen = f"the model's float inputs ({fold['layout']} {list(arr.shape)}, {describe_values(arr)})"
        fix = (f"save the decoded images as uint8 [N, {h}, {w}, 3] (before scale and normalize), or set "
               "[preprocess] fold = false to keep the float inputs")
        if labelled:
            fix += ("; these do not map back to whole-number pixels, and [preprocess] images cannot "
                    "stand in for a labelled set")
        raise ConfigError(f"{which} data '{fold['input']}' holds {seen}; fold = true takes uint8 [N, {h}, {w}, 3]",
                          hint=fix)
    raise ConfigError(f"{which} data '{fold['input']}' has dtype {arr.dtype}, the model input wants uint8 "
                      f"[N, {h}, {w}, 3] (fold = true)", hint=dtype_hint(arr, "uint8"))
