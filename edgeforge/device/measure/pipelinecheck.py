"""bench --end-to-end's build files checked on the host, before anything is sent: a
``pipeline.json`` the runner cannot use (an unknown step, a two-value mean for three channels,
a 60000 x 60000 resize, a post-processing op it lacks) and a raw image over the runner's caps
(bytes, pixels, or pixels once the steps resize it) are :class:`~edgeforge.errors.BuildInvalid`
(exit 2) naming the file and the field. The device is never charged for them: they fail before
the connection, and nothing unbounded is uploaded.

The steps are the runner's (``run_pipeline``), bounded as ``[preprocess]`` bounds them
(:mod:`edgeforge.project`); the post-processing is one of the runner's ops with plain, finite
settings (an NMS taken from a graph may say -1 where ``[postprocess]`` would not).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import Field, ValidationError

from ...config import Strict, describe
from ...errors import BuildInvalid
from ...project import MAX_PIXELS, MAX_SCALE, MAX_SIDE, Mean, Side, Std
from ...runner.limits import E2E_MAX_IMAGE_BYTES, E2E_MAX_PIXELS
from ...runner.pipeline import INTERPOLATIONS
from ...runner.postprocess import POSTPROCESS_OPS

HINT = "not a pipeline.json edgeforge wrote: rebuild with `edgeforge build`"


class Decode(Strict):
    op: Literal["decode"]
    mode: Literal["RGB"] = "RGB"


class Resize(Strict):
    op: Literal["resize"]
    size: list[Side] = Field(min_length=2, max_length=2)
    interpolation: Literal[INTERPOLATIONS] = "bilinear"


class ResizeShort(Strict):
    op: Literal["resize_short"]
    size: Side
    interpolation: Literal[INTERPOLATIONS] = "bilinear"


class Crop(Strict):
    op: Literal["crop"]
    size: list[Side] = Field(min_length=2, max_length=2)


class ChannelOrder(Strict):
    op: Literal["channel_order"]
    order: Literal["rgb", "bgr"]


class Scale(Strict):
    op: Literal["scale"]
    factor: float = Field(gt=0, le=MAX_SCALE, allow_inf_nan=False)


class Normalize(Strict):
    op: Literal["normalize"]
    mean: list[Mean] = Field(min_length=3, max_length=3)      # three channels: decode gives RGB
    std: list[Std] = Field(min_length=3, max_length=3)


class Layout(Strict):
    op: Literal["layout"]
    layout: Literal["NCHW", "NHWC"]


Step = Annotated[Union[Decode, Resize, ResizeShort, Crop, ChannelOrder, Scale, Normalize, Layout],
                 Field(discriminator="op")]
MAX_STEPS = 32
MAX_POST_VALUE = 1e6            # a post-processing setting (the runner caps NMS sizes itself)
OPS = ("decode", "resize", "resize_short", "crop", "channel_order", "scale", "normalize", "layout")


class Steps(Strict):
    preprocess: list[Step] = Field(min_length=1, max_length=MAX_STEPS)


IMAGE_HINT = "the images travel with the build to the device: rebuild with smaller ones in [preprocess] images"


def _refuse(path: Path, what: str, hint: str = HINT) -> None:
    raise BuildInvalid(f"{path}: {what}", hint=hint)


def check_pipeline(path: Path, doc: dict) -> None:
    """``doc`` (pipeline.json at ``path``) as the runner will take it, else BuildInvalid."""
    try:
        Steps.model_validate({"preprocess": doc.get("preprocess")})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [str(p) for p in err.get("loc", ())]
        if err.get("type") == "union_tag_invalid":
            got = (err.get("input") or {}).get("op") if isinstance(err.get("input"), dict) else None
            _refuse(path, f"field {'.'.join(loc[:2])}: unknown step {got!r} (the runner's: {', '.join(OPS)})")
        _refuse(path, f"field {'.'.join(loc[:2] + loc[3:])}: {describe(err).removeprefix('Value error, ')}")
    post = doc.get("postprocess")
    if post is None:
        return
    if not isinstance(post, dict):
        _refuse(path, f"field postprocess: must be a table of the post-processing (got {type(post).__name__})")
    if post.get("op", "none") not in POSTPROCESS_OPS:
        _refuse(path, f"field postprocess.op: unknown op {post.get('op')!r} (the runner's: "
                      f"{', '.join(POSTPROCESS_OPS)})")
    for key, value in post.items():
        if key in ("op", "kind"):
            continue
        plain = isinstance(value, (bool, int)) or (isinstance(value, float) and math.isfinite(value))
        if value is not None and not (plain and abs(value) <= MAX_POST_VALUE):
            _refuse(path, f"field postprocess.{key}: must be a finite number of at most {MAX_POST_VALUE:g} "
                          f"(got {str(value)[:40]})")


def _largest(size: tuple[int, int], steps: list[dict]) -> int:
    """The most pixels the image has through the steps' resizes and crops (as ``run_pipeline``
    computes them)."""
    w, h = size
    biggest = w * h
    for st in steps:
        if st["op"] == "resize":
            h, w = st["size"]
        elif st["op"] == "resize_short":
            k = float(st["size"]) / min(w, h)
            w, h = max(1, int(round(w * k))), max(1, int(round(h * k)))
        elif st["op"] == "crop":
            h, w = st["size"]
        biggest = max(biggest, w * h)
    return biggest


def check_images(files: dict[str, Path], steps: list[dict], where: Path) -> None:
    """Each raw image under the runner's caps, on the host: at most E2E_MAX_IMAGE_BYTES, a
    header (read by Pillow, nothing decoded) of at most E2E_MAX_PIXELS, and at most MAX_PIXELS
    once the steps resize it. Else BuildInvalid naming the image."""
    from PIL import Image

    for rel, path in files.items():
        size = path.stat().st_size
        if size > E2E_MAX_IMAGE_BYTES:
            _refuse(where, f"image {rel} is {size} bytes, over the runner's {E2E_MAX_IMAGE_BYTES >> 20} MiB "
                           "cap: nothing was sent", IMAGE_HINT)
        try:
            with Image.open(path) as img:
                dims = img.size
        except Exception as exc:  # noqa: BLE001 - PIL raises many kinds for a file that is no image
            _refuse(where, f"image {rel} does not open as an image: {type(exc).__name__}: {str(exc)[:120]}",
                    IMAGE_HINT)
        if math.prod(dims) > E2E_MAX_PIXELS:
            _refuse(where, f"image {rel} is {dims[0]} x {dims[1]} pixels, over the runner's {E2E_MAX_PIXELS}",
                    IMAGE_HINT)
        biggest = _largest(dims, steps)
        if biggest > MAX_PIXELS:
            _refuse(where, f"image {rel} ({dims[0]} x {dims[1]}) reaches {biggest} pixels through the "
                           f"pipeline's resizes (at most {MAX_PIXELS}, {MAX_SIDE} a side)", IMAGE_HINT)
