"""Pre-processing of one image as a build's pipeline.json declares it (resize, crop, normalize,
layout): the code verify checks on the host and the device runs end to end."""
from __future__ import annotations

try:
    import numpy as np
except ImportError:  # probe still reports the device; bench says numpy is missing
    np = None


# ---------------------------------------------------------------- pre-processing
# The declared [preprocess] pipeline (pipeline.json "steps"), implemented once with Pillow:
# the host's parity check in verify runs this code, and so does the device.

INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "area")


def _pil_filter(name):
    from PIL import Image

    f = getattr(Image, "Resampling", Image)
    return {"nearest": f.NEAREST, "bilinear": f.BILINEAR, "bicubic": f.BICUBIC, "area": f.BOX}[name]


def run_pipeline(image, steps):
    """A PIL image through ``steps`` (a list of {"op": ...}) -> the array one sample of the model
    input is (no batch axis). ops: decode {mode}, resize {size [h, w], interpolation}, resize_short {size,
    interpolation}, crop {size [h, w]} (centred), channel_order {order rgb|bgr}, scale {factor},
    normalize {mean, std} (per channel, in the channel order of the output), layout {NCHW|NHWC}."""
    img = image.convert("RGB")
    arr = None
    for st in steps:
        op = st["op"]
        if op == "decode":
            img = image.convert(st.get("mode", "RGB"))
        elif op == "resize":
            h, w = st["size"]
            img = img.resize((int(w), int(h)), _pil_filter(st.get("interpolation", "bilinear")))
        elif op == "resize_short":
            w, h = img.size
            k = float(st["size"]) / min(w, h)
            img = img.resize((max(1, int(round(w * k))), max(1, int(round(h * k)))),
                             _pil_filter(st.get("interpolation", "bilinear")))
        elif op == "crop":
            ch, cw = st["size"]
            w, h = img.size
            left, top = int(round((w - cw) / 2.0)), int(round((h - ch) / 2.0))
            img = img.crop((left, top, left + int(cw), top + int(ch)))
        else:
            if arr is None:
                arr = np.asarray(img, dtype=np.float32)          # [H, W, 3], RGB
            if op == "channel_order":
                arr = arr[..., ::-1] if st["order"] == "bgr" else arr
            elif op == "scale":
                arr = arr * np.float32(st["factor"])
            elif op == "normalize":
                arr = (arr - np.asarray(st["mean"], np.float32)) / np.asarray(st["std"], np.float32)
            elif op == "layout":
                arr = np.transpose(arr, (2, 0, 1)) if st["layout"] == "NCHW" else arr
            else:
                raise ValueError("unknown pre-processing step %r" % op)
    if arr is None:
        arr = np.asarray(img, dtype=np.float32)
    return np.ascontiguousarray(arr, dtype=np.float32)
