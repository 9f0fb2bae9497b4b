"""``edgeforge init --data DIR``: a folder of samples -> calibration and evaluation .npz files.

- Images (PNG, JPEG: read with Pillow) for a one-input image model ``[N, C, H, W]`` or
  ``[N, H, W, C]`` with C = 1 (grayscale) or 3 (RGB): resized to H x W, scaled to [0, 1]
  (a 16-bit PNG by 65535), then ``(x - mean) / std`` per channel where ``--mean``/``--std``
  are given (else none).
- ``.npy`` files (one array: one sample, or a batch when it has the input's rank) for a one-input
  model; ``.npz`` files with one array per input name (same rule) for any model.
- Sub-folders of DIR are classes: their sorted names are the labels 0, 1, ... (written as
  ``labels`` into the evaluation file). Files directly in DIR carry no label. With ``--task``
  detection, segmentation or ctc the labels come from ``--labels`` instead
  (:mod:`edgeforge.init_labels`) and sub-folders are only folders.
- Split 1:2 (a shuffle seeded by ``--seed``, per class where there are labels): a third
  calibrates, two thirds evaluate. ``data/split.json`` records the seed and, per file and row,
  the source each sample came from (``path``, or ``path#row`` for a batch in an array file).

Bounds, checked before anything is allocated: an image's pixels (:data:`MAX_IMAGE_PIXELS`), one
sample's elements (:data:`MAX_SAMPLE_ELEMENTS`), all samples' bytes (:data:`MAX_DATA_BYTES`),
read from image and array headers. Non-finite values (NaN, infinity) are refused. Nothing is
written here: :func:`make_data` returns the files' bytes for init to write together.
"""
from __future__ import annotations

import io
import json
import math
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import ConfigError

IMAGES = (".png", ".jpg", ".jpeg")
ARRAYS = (".npy", ".npz")
MAX_IMAGE_PIXELS = 1 << 26          # 67 M pixels (8192 x 8192): refused from the header, never decoded
MAX_SAMPLE_ELEMENTS = 1 << 26       # one sample of one input (a 4K RGB frame is 25 M)
MAX_DATA_BYTES = 2 << 30            # everything init writes into the two .npz files
MIN_STD = 1e-6                      # a smaller std in float32 is 0 or makes infinities
SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N", "I")


@dataclass
class DataSource:
    """``--data DIR`` and how its images are pre-processed; ``task`` and ``labels``: where the
    labels come from (``--task``, ``--labels``); ``seed``: the split's."""
    folder: str
    mean: str | None = None
    std: str | None = None
    resample: str = "bilinear"
    task: str | None = None
    labels: str | None = None
    seed: int = 0
    charset: str | None = None


@dataclass
class DataReport:
    calibration: int = 0
    evaluation: int = 0
    classes: list[str] = field(default_factory=list)
    preprocessing: str = ""
    labelled: str = ""                   # what labels the evaluation file holds, in words ("" none)
    task: dict = field(default_factory=dict)        # [task] keys init writes
    notes: list[str] = field(default_factory=list)


@dataclass
class Samples:
    """What was read: one array per input name, the source of each row, class labels."""
    arrays: dict[str, np.ndarray]
    sources: list[str]
    sizes: list[tuple[int, int]] = field(default_factory=list)     # images: (width, height)
    classes: np.ndarray | None = None


def _files(root: Path, folders_are_classes: bool) -> tuple[list[tuple[Path, int | None]], list[str]]:
    if not root.is_dir():
        raise ConfigError(f"--data {root}: not a directory", hint="give a folder of images or .npy/.npz files")
    known = IMAGES + ARRAYS
    subdirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if subdirs and folders_are_classes:
        classes = [d.name for d in subdirs]
        found = [(p, i) for i, d in enumerate(subdirs) for p in sorted(d.rglob("*"))
                 if p.is_file() and p.suffix.lower() in known]
    else:
        classes = []
        pick = root.rglob("*") if subdirs else root.iterdir()
        found = [(p, None) for p in sorted(pick) if p.is_file() and p.suffix.lower() in known
                 and not any(part.startswith(".") for part in p.relative_to(root).parts)]
    if not found:
        raise ConfigError(f"--data {root}: no images (.png, .jpg) or arrays (.npy, .npz) in it")
    kinds = {p.suffix.lower() in IMAGES for p, _ in found}
    if len(kinds) > 1:
        raise ConfigError(f"--data {root}: holds both images and arrays", hint="keep one kind of file in it")
    return found, classes


def _size_check(count: int, sample: list[int], dtype: str, what: str) -> None:
    """``count`` samples of shape ``sample`` in ``dtype`` fit the bounds, else a ConfigError."""
    elements = math.prod(sample)
    if elements > MAX_SAMPLE_ELEMENTS:
        raise ConfigError(f"{what}: one sample of shape {sample} has {elements:,} elements, more than init takes "
                          f"({MAX_SAMPLE_ELEMENTS:,})", hint="check the input's shape")
    total = count * elements * np.dtype(dtype).itemsize
    if total > MAX_DATA_BYTES:
        raise ConfigError(f"{what}: {count:,} samples of shape {sample} {dtype} are {total / 2**30:,.1f} GiB, more "
                          f"than init writes ({MAX_DATA_BYTES >> 30} GiB)", hint="give fewer samples")


def image_layout(spec: dict) -> tuple[int, int, int, bool]:
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
    bad = not all(math.isfinite(v) and abs(v) <= 1000 for v in vals) or (what == "std" and min(vals) < MIN_STD)
    if len(vals) != c or bad:
        raise ConfigError(f"--{what} {text!r}: give 1 or {c} finite value(s), at most 1000"
                          + (f", each >= {MIN_STD:g}" if what == "std" else ""))
    return np.asarray(vals, dtype="float32")


def open_image(path: Path):
    """A Pillow image, its size checked against :data:`MAX_IMAGE_PIXELS` from the header,
    before any pixel is decoded. A decompression bomb is a ConfigError."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            im = Image.open(path)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            im = None
        except (OSError, ValueError, SyntaxError) as exc:
            raise ConfigError(f"--data: cannot read image {path}: {exc}") from None
    if im is None or im.width * im.height > MAX_IMAGE_PIXELS:
        size = "" if im is None else f" ({im.width}x{im.height})"
        if im is not None:
            im.close()
        raise ConfigError(f"--data: image {path}{size} has more pixels than init decodes "
                          f"({MAX_IMAGE_PIXELS:,})", hint="resize it first")
    return im


def _pixels(im, c: int, size: tuple[int, int], how) -> np.ndarray:
    """``im`` as float32 [H, W, c] in [0, 1]: 8-bit by 255, 16-bit (mode I;16, I) by 65535."""
    from PIL import Image

    if im.mode in SIXTEEN_BIT:
        a = np.asarray(im, dtype="float32")
        if a.size and (a.min() < 0 or a.max() > 65535):
            raise ValueError(f"32-bit integer pixels ({a.min():.0f} to {a.max():.0f}); init reads 8- and 16-bit")
        a = np.asarray(Image.fromarray(a / 65535.0, "F").resize(size, how))[..., None]
        return np.repeat(a, c, axis=2) if c == 3 else a
    if im.mode == "F":
        raise ValueError("floating-point pixels; init reads 8- and 16-bit images")
    return np.asarray(im.convert("L" if c == 1 else "RGB").resize(size, how), dtype="float32").reshape(
        size[1], size[0], c) / 255.0


def _images(files, spec: dict, src: DataSource) -> tuple[np.ndarray, list[tuple[int, int]], str]:
    from PIL import Image

    c, h, w, first = image_layout(spec)
    m, s = _per_channel(src.mean, c, "mean"), _per_channel(src.std, c, "std")
    raw = np.dtype(spec["dtype"]).kind in "iu"          # an integer input takes the pixel values
    if raw and (m is not None or s is not None):
        raise ConfigError(f"--mean/--std: input '{spec['name']}' is {spec['dtype']}: images are written as their "
                          "pixel values (0-255), not normalised", hint="drop --mean and --std")
    _size_check(len(files), [c, h, w], spec["dtype"], f"input '{spec['name']}'")
    how = getattr(getattr(Image, "Resampling", Image), src.resample.upper())
    out = np.empty((len(files), c, h, w) if first else (len(files), h, w, c), dtype="float32")
    sizes, deep = [], 0
    for i, (path, _) in enumerate(files):
        try:
            with open_image(path) as im, warnings.catch_warnings():
                warnings.filterwarnings("ignore", category=UserWarning, module="PIL")   # palette notes
                sizes.append(im.size)
                deep += im.mode in SIXTEEN_BIT
                arr = _pixels(im, c, (w, h), how)
                if raw:
                    arr = np.rint(arr * (65535.0 if im.mode in SIXTEEN_BIT else 255.0))
        except (OSError, ValueError, SyntaxError) as exc:
            raise ConfigError(f"--data: cannot read image {path}: {exc}") from None
        arr = (arr - (0 if m is None else m)) / (1 if s is None else s)
        out[i] = arr.transpose(2, 0, 1) if first else arr
    norm = (f"mean {_fmt(m)} / std {_fmt(s)}" if m is not None and s is not None
            else f"mean {_fmt(m)}" if m is not None else f"std {_fmt(s)}" if s is not None
            else "no mean/std")
    scale = ("pixel values (0-255" + (", 16-bit 0-65535)" if deep else ")") if raw
             else "scale to [0,1]" + (f" ({deep} 16-bit: by 65535)" if deep else ""))
    what = (f"{'grayscale' if c == 1 else 'RGB'}, resize to {h}x{w} ({src.resample}), {scale}, "
            f"{norm}, {'NCHW' if first else 'NHWC'} {spec['dtype']}")
    return _cast(out, spec, "the pre-processed images"), sizes, what


def _fmt(v: np.ndarray) -> str:
    return "[" + ", ".join(f"{x:.4g}" for x in v.tolist()) + "]"


def _cast(arr: np.ndarray, spec: dict, what: str) -> np.ndarray:
    """``arr`` in the input's dtype; NaN, infinities and values the dtype cannot hold refused."""
    dtype = np.dtype(spec["dtype"])
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = int(np.argmax(~np.isfinite(arr).reshape(len(arr), -1).all(axis=1)))
        raise ConfigError(f"--data: {what} hold NaN or infinite values (sample {bad}); init writes finite data")
    if dtype.kind in "iu" and arr.size:
        info = np.iinfo(dtype)
        if arr.min() < info.min or arr.max() > info.max:
            raise ConfigError(f"--data: {what} hold values from {arr.min():.6g} to {arr.max():.6g}; input "
                              f"'{spec['name']}' is {dtype} ({info.min} to {info.max})")
    return arr.astype(dtype)


def _header(fp, what: str) -> tuple[tuple, np.dtype]:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fp)
        read = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
        if read is None:
            raise ValueError(f"npy format version {version}")
        shape, _, dtype = read(fp)
    except (OSError, ValueError, SyntaxError) as exc:
        raise ConfigError(f"--data: cannot read {what}: {exc}") from None
    if dtype.hasobject or dtype.kind not in "biuf":
        raise ConfigError(f"--data: {what} holds {dtype} data; init takes numbers (bool, int, uint, float)")
    return shape, dtype


def _headers(path: Path) -> dict[str, tuple[tuple, np.dtype]]:
    """Each array's (shape, dtype) in a .npy or .npz file, read from its header alone."""
    try:
        if path.suffix.lower() == ".npy":
            with open(path, "rb") as fp:
                return {"": _header(fp, str(path))}
        with zipfile.ZipFile(path) as z:
            out = {}
            for name in z.namelist():
                with z.open(name) as fp:
                    out[name[:-4] if name.endswith(".npy") else name] = _header(fp, f"{path}: {name}")
            return out
    except (OSError, zipfile.BadZipFile, RuntimeError, NotImplementedError) as exc:
        raise ConfigError(f"--data: cannot read {path}: {exc}") from None


def _rows(shape: tuple, spec: dict, path: Path) -> int:
    """How many samples an array of ``shape`` holds for input ``spec``, else a ConfigError."""
    rank = len(spec["shape"])
    batch = len(shape) == rank
    sample = list(shape[1:] if batch else shape)
    if len(shape) not in (rank - 1, rank) or any(d > 0 and d != a for d, a in zip(spec["shape"][1:], sample)):
        raise ConfigError(f"--data: {path.name} holds shape {list(shape)}, input '{spec['name']}' "
                          f"takes {spec['shape']} (one sample, or a batch)")
    return int(shape[0]) if batch else 1


def _plan_arrays(files, inputs: list[dict]) -> list[int]:
    """The samples per file, from the headers; every bound checked before one array is read."""
    if any(p.suffix.lower() == ".npy" for p, _ in files) and len(inputs) != 1:
        raise ConfigError(f"--data: .npy files are one array, the model takes {len(inputs)} inputs",
                          hint="use .npz files with one array per input name")
    counts, totals = [], {s["name"]: [0, None] for s in inputs}
    for path, _ in files:
        heads = _headers(path)
        n = None
        for s in inputs:
            key = "" if path.suffix.lower() == ".npy" else s["name"]
            if key not in heads:
                raise ConfigError(f"--data: {path.name} has no array '{s['name']}'")
            shape = heads[key][0]
            rows = _rows(shape, s, path)
            if n is not None and rows != n:
                raise ConfigError(f"--data: {path.name}: the arrays disagree on the number of samples")
            n = rows
            totals[s["name"]][0] += rows
            sample = list(shape[-(len(s["shape"]) - 1):]) if len(s["shape"]) > 1 else []
            if totals[s["name"]][1] is not None and totals[s["name"]][1] != sample:
                raise ConfigError(f"--data: {path.name}'s '{s['name']}' has samples of shape {sample}, an earlier "
                                  f"file {totals[s['name']][1]}", hint="one size per free dimension: the samples "
                                  "of an input are stacked into one array")
            totals[s["name"]][1] = sample
        counts.append(n)
    for s in inputs:
        _size_check(totals[s["name"]][0], totals[s["name"]][1], s["dtype"], f"input '{s['name']}'")
    return counts


def _arrays(files, inputs: list[dict], root: Path) -> Samples:
    counts = _plan_arrays(files, inputs)
    got: dict[str, list[np.ndarray]] = {s["name"]: [] for s in inputs}
    sources: list[str] = []
    labels: list[int] = []
    for (path, label), n in zip(files, counts):
        rel = path.relative_to(root).as_posix()
        labels += [-1 if label is None else label] * n
        try:
            if path.suffix.lower() == ".npy":
                loaded = {inputs[0]["name"]: np.load(path, allow_pickle=False)}
            else:
                with np.load(path, allow_pickle=False) as z:
                    loaded = {s["name"]: z[s["name"]] for s in inputs}
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise ConfigError(f"--data: cannot read {path}: {exc}") from None
        single = False
        for s in inputs:
            a = np.asarray(loaded[s["name"]])
            single = a.ndim == len(s["shape"]) - 1
            got[s["name"]].append(_cast(a[None] if single else a, s, f"{path.name}'s '{s['name']}'"))
        sources += [rel] if single else [f"{rel}#{i}" for i in range(n)]
    return Samples({k: np.concatenate(v) for k, v in got.items()}, sources, classes=np.asarray(labels, "int64"))


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


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _read(src: DataSource, inputs: list[dict], root: Path, report: DataReport) -> Samples:
    files, classes = _files(root, folders_are_classes=src.task in (None, "classification"))
    if src.labels is not None:                    # masks kept inside --data are labels, not samples
        labels = Path(src.labels).expanduser().resolve()
        files = [(p, c) for p, c in files if labels not in p.resolve().parents and p.resolve() != labels]
        if not files:
            raise ConfigError(f"--data {root}: no images outside --labels {src.labels}")
    report.classes = classes
    if files[0][0].suffix.lower() in IMAGES:
        if len(inputs) != 1:
            raise ConfigError(f"--data {root}: images feed a one-input model; this one takes {len(inputs)}",
                              hint="use .npz files with one array per input name")
        x, sizes, report.preprocessing = _images(files, inputs[0], src)
        sources = [p.relative_to(root).as_posix() for p, _ in files]
        cls = np.asarray([lab for _, lab in files], "int64") if classes else None
        return Samples({inputs[0]["name"]: x}, sources, sizes, cls)
    if src.mean is not None or src.std is not None:
        raise ConfigError("--mean/--std apply to images; arrays are used as they are")
    if src.task not in (None, "classification"):
        raise ConfigError(f"--task {src.task} reads its labels for images: --data holds arrays",
                          hint="give a folder of images, or write the labels into the evaluation .npz yourself "
                               "(docs/task.md)")
    got = _arrays(files, inputs, root)
    report.preprocessing = "arrays as stored (cast to the input dtype), no resize or scaling"
    if not classes:
        got.classes = None
    return got


def make_data(src: DataSource, inputs: list[dict], calib_rel: str, eval_rel: str,
              labeller: Callable[[Samples], Any] | None = None) -> tuple[DataReport, dict[str, bytes]]:
    """Read ``src``; return what was read and the files to write (path relative to the project
    -> bytes): the two .npz files and data/split.json. Nothing is written here. ``labeller``:
    the task's labels of what was read (:func:`edgeforge.init_labels.task_labels`), for a
    ``src.task`` other than classification."""
    root = Path(src.folder).expanduser()
    report = DataReport()
    got = _read(src, inputs, root, report)
    n = len(got.sources)
    extra = None
    if src.task not in (None, "classification"):
        if labeller is None:
            raise ConfigError(f"--task {src.task}: its labels need a labeller (edgeforge.init_labels)")
        extra = labeller(got)
        report.task, report.notes, report.labelled = extra.task, extra.notes, extra.words
    elif src.labels is not None:
        raise ConfigError("--labels goes with --task detection, segmentation or ctc; a classifier's labels are "
                          "the sub-folders of --data")
    elif got.classes is not None:
        report.labelled = f"labels from {len(report.classes)} sub-folders"
        if src.task == "classification":
            report.task = {"kind": "classification", "label_names": report.classes}
    elif src.task == "classification":
        report.task = {"kind": "classification"}
    calib, evals = _split(got.classes, n, src.seed)
    if len(calib) == 0 or len(evals) == 0:
        raise ConfigError(f"--data {root}: {n} sample(s) cannot be split 1:2",
                          hint="give at least 3 (a class needs 3 to reach both files)")
    labels = extra.take(evals) if extra is not None else (
        {"labels": got.classes[evals]} if got.classes is not None else {})
    split = {"seed": src.seed, "data": str(root), "calibration": [got.sources[i] for i in calib],
             "evaluation": [got.sources[i] for i in evals]}
    files = {calib_rel: npz_bytes({k: v[calib] for k, v in got.arrays.items()}),
             eval_rel: npz_bytes({**{k: v[evals] for k, v in got.arrays.items()}, **labels}),
             SPLIT: (json.dumps(split, indent=1, ensure_ascii=False) + "\n").encode("utf-8")}
    report.calibration, report.evaluation = len(calib), len(evals)
    return report, files


SPLIT = "data/split.json"
