"""``[preprocess]``: the declared pipeline as steps, and its parity with the training-time
``reference = "module:function"`` (run in a child process, like all user code).

The declared pipeline is the runner's ``run_pipeline`` (the code the device runs). When the
tensors differ beyond the tolerance, each setting is switched in turn (channel order,
interpolation, mean/std, scale, layout); the first switch that makes them agree names the
stage that differs.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..native import run_native
from ..runner.pipeline import INTERPOLATIONS, run_pipeline

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
MAX_IMAGES = 16
IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


class ParityError(ValueError):
    """The declared pipeline does not give the reference's tensors."""


def steps_of(s: dict) -> list[dict]:
    """The pipeline.json steps of a ``[preprocess]`` section (as a dict)."""
    out: list[dict] = [{"op": "decode", "mode": "RGB"}]
    if s.get("resize"):
        out.append({"op": "resize", "size": list(s["resize"]), "interpolation": s["interpolation"]})
    if s.get("resize_short"):
        out.append({"op": "resize_short", "size": s["resize_short"], "interpolation": s["interpolation"]})
    if s.get("crop"):
        out.append({"op": "crop", "size": list(s["crop"])})
    out += [{"op": "channel_order", "order": s["channel_order"]},
            {"op": "scale", "factor": s["scale"]},
            {"op": "normalize", "mean": list(s["mean"]), "std": list(s["std"])},
            {"op": "layout", "layout": s["layout"]}]
    return out


def images(folder: Path) -> list[Path]:
    files = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    return files[:MAX_IMAGES]


def declared(s: dict, paths: list[Path]) -> list[np.ndarray]:
    from PIL import Image

    st = steps_of(s)
    out = []
    for p in paths:
        with Image.open(p) as img:
            out.append(run_pipeline(img, st))
    return out


def call_reference(root: str, spec: str, paths: list[str]) -> list[np.ndarray]:
    """In the child: ``spec(PIL.Image)`` for each image, as float32 arrays (batch axis of 1
    dropped)."""
    import importlib
    import sys

    from PIL import Image

    sys.path.insert(0, root)
    module, _, name = spec.partition(":")
    fn = getattr(importlib.import_module(module), name)
    out = []
    for p in paths:
        with Image.open(p) as img:
            a = np.asarray(fn(img), dtype=np.float32)
        out.append(a[0] if a.ndim == 4 and a.shape[0] == 1 else a)
    return out


def reference(root: Path, spec: str, paths: list[Path], log: Path, pass_name: str = "verify") -> list[np.ndarray]:
    return run_native(pass_name, f"the reference transform {spec}", call_reference,
                      (str(root), spec, [str(p) for p in paths]), log, hint=f"see {log}", timeout=600)


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """The largest absolute difference over all images (inf when a shape differs)."""
    worst = 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return float("inf")
        worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - y))) if x.size else 0.0)
    return worst


def switches(s: dict) -> list[tuple[str, str, dict]]:
    """(stage, what the switch says, the settings switched), in the order they are tried."""
    out = [("channel order", f"channel_order = \"{'bgr' if s['channel_order'] == 'rgb' else 'rgb'}\"",
            {"channel_order": "bgr" if s["channel_order"] == "rgb" else "rgb"})]
    out += [("interpolation", f"interpolation = \"{i}\"", {"interpolation": i})
            for i in INTERPOLATIONS if i != s["interpolation"]]
    plain = list(s["mean"]) == [0.0] * len(s["mean"]) and list(s["std"]) == [1.0] * len(s["std"])
    out.append(("mean/std", "the ImageNet mean/std" if plain else "no mean/std (0 and 1)",
                IMAGENET if plain else {"mean": [0.0] * len(s["mean"]), "std": [1.0] * len(s["std"])}))
    other = 1.0 if abs(s["scale"] - 1.0) > 1e-12 else 1.0 / 255.0
    out.append(("scale", f"scale = {other:.6g}", {"scale": other}))
    out.append(("layout", f"layout = \"{'NHWC' if s['layout'] == 'NCHW' else 'NCHW'}\"",
                {"layout": "NHWC" if s["layout"] == "NCHW" else "NCHW"}))
    return out


def check(s: dict, paths: list[Path], ref: list[np.ndarray], tolerance: float) -> dict:
    """Compare the declared pipeline with the reference's tensors; ParityError names the first
    stage whose switch makes them agree, and the max difference."""
    mine = declared(s, paths)
    diff = max_diff(mine, ref)
    record = {"images": len(paths), "max_abs_diff": diff, "tolerance": tolerance,
              "shape": list(mine[0].shape) if mine else None}
    if diff <= tolerance:
        return {**record, "status": "passed"}
    shapes = "" if np.isfinite(diff) else (f" (shape {list(mine[0].shape)}, the reference gives "
                                           f"{list(ref[0].shape)})")
    for stage, says, change in switches(s):
        if max_diff(declared({**s, **change}, paths), ref) <= tolerance:
            raise ParityError(f"pre-processing differs from the reference at the {stage}: with {says} "
                              f"it matches; as declared the max difference is {diff:.4g}{shapes}")
    raise ParityError(f"pre-processing differs from the reference, and no single setting (channel order, "
                      f"interpolation, mean/std, scale, layout) explains it: max difference {diff:.4g}{shapes}")
