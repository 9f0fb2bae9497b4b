"""``edgeforge init --data DIR``: a folder of samples -> calibration and evaluation .npz files.

- Images (PNG, JPEG: read with Pillow) for a one-input image model ``[N, C, H, W]`` or
  ``[N, H, W, C]`` with C = 1 (grayscale) or 3 (RGB): resized to H x W, scaled to [0, 1],
  then ``(x - mean) / std`` per channel where ``--mean``/``--std`` are given (else none).
- ``.npy`` files (one array: one sample, or a batch when it has the input's rank) for a one-input
  model; ``.npz`` files with one array per input name (same rule) for any model.
- Sub-folders of DIR are classes: their sorted names are the labels 0, 1, ... (written as
  ``labels`` into the evaluation file). Files directly in DIR carry no label.
- Split 1:2 (a seeded shuffle, per class where there are labels): a third calibrates, two
  thirds evaluate.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ConfigError

IMAGES = (".png", ".jpg", ".jpeg")
ARRAYS = (".npy", ".npz")
RESAMPLE = ("bilinear", "nearest", "bicubic")


@dataclass
class DataReport:
    calibration: int = 0
    evaluation: int = 0
    classes: list[str] = field(default_factory=list)
    preprocessing: str = ""
    skipped: list[str] = field(default_factory=list)


def _files(root: Path) -> tuple[list[tuple[Path, int | None]], list[str]]:
    if not root.is_dir():
        raise ConfigError(f"--data {root}: not a directory", hint="give a folder of images or .npy/.npz files")
    subdirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    known = IMAGES + ARRAYS
    if subdirs:
        classes = [d.name for d in subdirs]
        found = [(p, i) for i, d in enumerate(subdirs) for p in sorted(d.rglob("*"))
                 if p.is_file() and p.suffix.lower() in known]
    else:
        classes = []
        found = [(p, None) for p in sorted(root.iterdir()) if p.is_file() and p.suffix.lower() in known]
    if not found:
        raise ConfigError(f"--data {root}: no images (.png, .jpg) or arrays (.npy, .npz) in it")
    kinds = {p.suffix.lower() in IMAGES for p, _ in found}
    if len(kinds) > 1:
        raise ConfigError(f"--data {root}: holds both images and arrays", hint="keep one kind of file in it")
    return found, classes


def _image_layout(spec: dict) -> tuple[int, int, int, bool]:
    """(channels, height, width, channels_first) of a one-image input, or a ConfigError."""
    shape = spec["shape"]
    if len(shape) != 4:
        raise ConfigError(f"input '{spec['name']}' has shape {shape}: images need [N, C, H, W] or [N, H, W, C]")
    first = shape[1] in (1, 3)
    c, h, w = (shape[1], shape[2], shape[3]) if first else (shape[3], shape[1], shape[2])
    if c not in (1, 3) or h < 1 or w < 1:
        raise ConfigError(f"input '{spec['name']}' has shape {shape}: images need 1 or 3 channels and a "
                          "fixed height and width", hint="fix them with --input name:shape:dtype")
    return c, h, w, first


def _per_channel(text: str | None, c: int, what: str) -> np.ndarray | None:
    if text is None:
        return None
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"--{what} {text!r}: give numbers separated by commas") from None
    if len(vals) == 1:
        vals = vals * c
    if len(vals) != c or (what == "std" and any(v <= 0 for v in vals)):
        raise ConfigError(f"--{what} {text!r}: give 1 or {c} value(s)" + (", each > 0" if what == "std" else ""))
    return np.asarray(vals, dtype="float32")


def _images(files, spec: dict, mean: str | None, std: str | None, resample: str) -> tuple[np.ndarray, str]:
    from PIL import Image

    c, h, w, first = _image_layout(spec)
    m, s = _per_channel(mean, c, "mean"), _per_channel(std, c, "std")
    mode = "L" if c == 1 else "RGB"
    how = getattr(getattr(Image, "Resampling", Image), resample.upper())
    out = []
    for path, _ in files:
        try:
            with Image.open(path) as im:
                arr = np.asarray(im.convert(mode).resize((w, h), how), dtype="float32") / 255.0
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--data: cannot read image {path}: {exc}") from None
        arr = arr.reshape(h, w, c)
        if m is not None:
            arr = arr - m
        if s is not None:
            arr = arr / s
        out.append(arr.transpose(2, 0, 1) if first else arr)
    def people(a):      # rounded for a person (float32's 0.48500001430511475 is 0.485)
        return "[" + ", ".join(f"{v:.4g}" for v in a.tolist()) + "]"
    norm = (f"mean {people(m)} / std {people(s)}" if m is not None and s is not None
            else f"mean {people(m)}" if m is not None else f"std {people(s)}" if s is not None
            else "no mean/std")
    layout = "NCHW" if first else "NHWC"
    what = (f"{'grayscale' if c == 1 else 'RGB'}, resize to {h}x{w} ({resample}), scale to [0,1], "
            f"{norm}, {layout} {spec['dtype']}")
    return np.stack(out).astype(spec["dtype"]), what


def _samples(arr: np.ndarray, spec: dict, path: Path) -> np.ndarray:
    rank = len(spec["shape"])
    if arr.ndim == rank - 1:
        arr = arr[None]
    if arr.ndim != rank or any(d > 0 and d != a for d, a in zip(spec["shape"][1:], arr.shape[1:])):
        raise ConfigError(f"--data: {path.name} holds shape {list(arr.shape)}, input '{spec['name']}' "
                          f"takes {spec['shape']} (one sample, or a batch)")
    return arr.astype(spec["dtype"])


def _arrays(files, inputs: list[dict]) -> tuple[dict[str, np.ndarray], list[int]]:
    got: dict[str, list[np.ndarray]] = {s["name"]: [] for s in inputs}
    counts = []
    for path, _ in files:
        try:
            if path.suffix.lower() == ".npy":
                if len(inputs) != 1:
                    raise ConfigError(f"--data: {path.name} is one array, the model takes {len(inputs)} inputs",
                                      hint="use .npz files with one array per input name")
                loaded = {inputs[0]["name"]: np.load(path, allow_pickle=False)}
            else:
                with np.load(path, allow_pickle=False) as z:
                    loaded = {k: z[k] for k in z.files}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--data: cannot read {path}: {exc}") from None
        n = None
        for s in inputs:
            if s["name"] not in loaded:
                raise ConfigError(f"--data: {path.name} has no array '{s['name']}'")
            a = _samples(loaded[s["name"]], s, path)
            if n is not None and a.shape[0] != n:
                raise ConfigError(f"--data: {path.name}: the arrays disagree on the number of samples")
            n = a.shape[0]
            got[s["name"]].append(a)
        counts.append(n)
    return {k: np.concatenate(v) for k, v in got.items()}, counts


def _split(labels: np.ndarray | None, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices of calibration (a third) and evaluation (two thirds), per class where labelled."""
    rng = np.random.default_rng(seed)
    groups = [np.arange(n)] if labels is None else [np.flatnonzero(labels == k) for k in np.unique(labels)]
    calib, evals = [], []
    for g in groups:
        g = rng.permutation(g)
        k = len(g) // 3
        calib.append(g[:k])
        evals.append(g[k:])
    return np.sort(np.concatenate(calib)), np.sort(np.concatenate(evals))


def make_data(root: Path, inputs: list[dict], calib_path: Path, eval_path: Path, *, mean: str | None = None,
              std: str | None = None, resample: str = "bilinear") -> DataReport:
    """Read DIR (``root``), write the two .npz files. Returns what was written and how."""
    files, classes = _files(root)
    report = DataReport(classes=classes)
    if files[0][0].suffix.lower() in IMAGES:
        if len(inputs) != 1:
            raise ConfigError(f"--data {root}: images feed a one-input model; this one takes {len(inputs)}",
                              hint="use .npz files with one array per input name")
        x, report.preprocessing = _images(files, inputs[0], mean, std, resample)
        arrays, counts = {inputs[0]["name"]: x}, [1] * len(files)
    else:
        if mean is not None or std is not None:
            raise ConfigError("--mean/--std apply to images; arrays are used as they are")
        arrays, counts = _arrays(files, inputs)
        report.preprocessing = "arrays as stored (cast to the input dtype), no resize or scaling"
    n = sum(counts)
    labels = (np.repeat([lab for _, lab in files], counts).astype("int64") if classes else None)
    calib, evals = _split(labels, n)
    if len(calib) == 0 or len(evals) == 0:
        raise ConfigError(f"--data {root}: {n} sample(s) cannot be split 1:2",
                          hint="give at least 3 (a class needs 3 to reach both files)")
    calib_path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(calib_path, **{k: v[calib] for k, v in arrays.items()})
    extra = {"labels": labels[evals]} if labels is not None else {}
    np.savez(eval_path, **{k: v[evals] for k, v in arrays.items()}, **extra)
    report.calibration, report.evaluation = len(calib), len(evals)
    return report
