"""``bench --end-to-end``: each of the build's raw images through decode, pre-processing, the
model at batch 1 and post-processing, every stage timed on its own."""
from __future__ import annotations

import math
import os
import sys
import time

try:
    import numpy as np
except ImportError:  # probe still reports the device; bench says numpy is missing
    np = None

from .limits import E2E_MAX_IMAGES, E2E_MAX_IMAGE_BYTES, E2E_MAX_PIXELS, E2E_MAX_RUNS
from .pipeline import run_pipeline
from .postprocess import postprocess
from .protocol import BuildFault
from .timing import median


# ---------------------------------------------------------------- end to end (bench --end-to-end)
# Each of the build's raw images, per run: decode (OpenCV where the device has it, else Pillow),
# pre-process (run_pipeline: the code verify checked), inference at batch 1, post-process. Every
# stage is timed on its own; the share of the time outside the model is the "AI tax".

E2E_STAGES = ("decode", "preprocess", "infer", "postprocess")


class E2EMissing(Exception):
    """The device's Python cannot decode or pre-process images (no Pillow)."""


def _decoder():
    try:
        from PIL import Image  # noqa: F401
    except ImportError as exc:
        raise E2EMissing("Pillow is not importable by %s (%s)" % (sys.executable, exc)) from exc
    try:
        import cv2
        return "opencv", getattr(cv2, "__version__", None)
    except ImportError:
        import PIL
        return "pillow", getattr(PIL, "__version__", None)


def decode_image(data, decoder):
    """JPEG/PNG bytes -> an RGB PIL image (what run_pipeline takes)."""
    from PIL import Image

    if decoder == "opencv":
        import cv2

        arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if arr is None:
            raise BuildFault("an image of the build does not decode")
        return Image.fromarray(arr[..., ::-1])
    import io

    img = Image.open(io.BytesIO(data))
    img.load()
    return img.convert("RGB")


def _image_bytes(build_dir, rels):
    """The images' bytes, each checked first: at most E2E_MAX_IMAGE_BYTES, and a header (read by
    Pillow, nothing decoded) of at most E2E_MAX_PIXELS pixels."""
    import io

    from PIL import Image

    out = []
    for rel in rels[:E2E_MAX_IMAGES]:
        path = os.path.join(build_dir, rel)
        if os.path.getsize(path) > E2E_MAX_IMAGE_BYTES:
            raise BuildFault("image %s is over %d bytes" % (rel, E2E_MAX_IMAGE_BYTES))
        with open(path, "rb") as fh:
            data = fh.read()
        try:
            w, h = Image.open(io.BytesIO(data)).size
        except Exception as exc:
            raise BuildFault("image %s does not open: %s" % (rel, exc)) from exc
        if w * h > E2E_MAX_PIXELS:
            raise BuildFault("image %s has %d pixels (at most %d)" % (rel, w * h, E2E_MAX_PIXELS))
        out.append(data)
    return out


def _stage_summary(xs):
    s = sorted(xs)
    if not s:
        return {"p50_ms": None, "p99_ms": None, "mean_ms": None}
    p99 = s[min(len(s) - 1, int(math.ceil(0.99 * len(s))) - 1)]
    return {"p50_ms": float(median(s)), "p99_ms": float(p99), "mean_ms": float(sum(s)) / len(s)}


def e2e_summary(samples):
    """Per-stage and whole p50/p99/mean (ms) of per-image stage samples, and the AI tax: the
    share of the summed time spent outside inference."""
    total = [sum(parts) for parts in zip(*(samples[st] for st in E2E_STAGES))]
    whole = sum(total)
    infer = sum(samples["infer"])
    return {"stages": dict((st, _stage_summary(samples[st])) for st in E2E_STAGES),
            "total": _stage_summary(total),
            "ai_tax": (whole - infer) / whole if whole > 0 else None,
            "shares": dict((st, sum(samples[st]) / whole if whole > 0 else None) for st in E2E_STAGES)}


def end_to_end(spec, build_dir, run, feeds):
    """The ``end_to_end`` event's figures: ``spec["end_to_end"]`` = {images (paths in the build),
    steps (pre-processing), input (the input the image feeds), postprocess, runs}. One warm-up
    pass over the images, then ``runs`` images timed (cycling through them)."""
    e2e = spec["end_to_end"]
    decoder, version = _decoder()
    images = _image_bytes(build_dir, list(e2e.get("images") or []))
    if not images:
        raise BuildFault("the build carries no raw images for the end-to-end run")
    name, steps, post = e2e["input"], e2e.get("steps") or [], e2e.get("postprocess") or {}
    dtype = next((i.get("dtype") for i in spec["inputs"] if i["name"] == name), "float32") or "float32"
    others = dict((k, v[:1]) for k, v in feeds.items() if k != name)
    runs = min(int(e2e.get("runs") or len(images)), E2E_MAX_RUNS)
    samples = dict((st, []) for st in E2E_STAGES)
    clock = time.perf_counter

    def once(data, keep):
        t0 = clock()
        img = decode_image(data, decoder)
        t1 = clock()
        x = run_pipeline(img, steps)[None].astype(dtype, copy=False)
        t2 = clock()
        outs = run(dict(others, **{name: x}))
        t3 = clock()
        postprocess(outs, post)
        t4 = clock()
        if keep:
            for st, a, b in zip(E2E_STAGES, (t0, t1, t2, t3), (t1, t2, t3, t4)):
                samples[st].append((b - a) * 1e3)

    for data in images:
        once(data, False)
    for i in range(runs):
        once(images[i % len(images)], True)
    return dict(e2e_summary(samples), samples_ms=samples, images=len(images), runs=runs, decoder=decoder,
                decoder_version=version, postprocess=post.get("op", "none"))
