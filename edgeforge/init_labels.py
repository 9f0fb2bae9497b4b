"""``edgeforge init --task KIND --labels L``: the labels a user has, as the evaluation .npz holds
them (:mod:`edgeforge.task.labels`), one entry per image of ``--data``.

- detection: a COCO-style ``instances.json`` (``images`` with ``id`` and ``file_name``,
  ``annotations`` with ``image_id``, ``bbox`` ``[x, y, w, h]`` in the image's pixels and
  ``category_id``, ``categories`` with ``id`` and ``name``). An image is matched by its path
  under ``--data``, else by its file name. Boxes are scaled to the model input's pixels, as the
  image is resized: ``gt_boxes [K, 4]`` (x1, y1, x2, y2), ``gt_classes [K]`` (the categories in
  the order of their ids: 0, 1, ...), ``gt_counts [N]``. ``iscrowd`` boxes are left out.
- segmentation: a folder of mask PNGs, one per image at the same path with ``.png`` (or the
  same file stem at the top), one channel (mode L or P) of class ids, 255 ignored, the image's
  size: resized (nearest) to the input's, ``labels [N, H, W]``.
- ctc: a text file of lines ``path<TAB>text`` (PaddleOCR's rec_gt format; a space works too):
  each character's class is its place in ``--charset`` (default: the file's characters, sorted),
  the blank the class after them (``[task] blank``): ``labels [N, L]`` padded with -1.

Every image needs its labels (an image without boxes is listed in ``images`` with no
annotation); a label file is bounded in size before it is read.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .config import describe
from .errors import ConfigError
from .init_data import Samples, image_layout, open_image
from .task.labels import check_labels

MAX_LABEL_BYTES = 256 << 20
IGNORE = 255


@dataclass
class TaskLabels:
    """Per-sample labels and how to write the evaluation rows ``take(indices)``."""
    take: Callable[[np.ndarray], dict]
    task: dict = field(default_factory=dict)     # [task] keys
    notes: list[str] = field(default_factory=list)
    words: str = ""


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CocoImage(_Loose):
    id: int
    file_name: str = Field(min_length=1)
    width: Optional[int] = Field(None, gt=0)
    height: Optional[int] = Field(None, gt=0)


class CocoAnnotation(_Loose):
    image_id: int
    category_id: int
    bbox: list[float] = Field(min_length=4, max_length=4)
    iscrowd: int = 0


class CocoCategory(_Loose):
    id: int
    name: str = ""


class Coco(_Loose):
    images: list[CocoImage]
    annotations: list[CocoAnnotation] = []
    categories: list[CocoCategory] = Field(min_length=1)


def _text(path: Path, what: str) -> str:
    try:
        if path.is_dir():
            raise ConfigError(f"--labels {path}: a directory, not a file ({what})")
        with open(path, "rb") as fh:                   # read at most the cap: /dev/zero has no size
            raw = fh.read(MAX_LABEL_BYTES + 1)
        if len(raw) > MAX_LABEL_BYTES:
            raise ConfigError(f"--labels {path}: larger than init reads ({MAX_LABEL_BYTES >> 20} MiB)")
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"--labels {path}: not UTF-8 text ({what})") from None
    except OSError as exc:
        raise ConfigError(f"--labels {path}: cannot read it: {exc.strerror or exc}") from None


def _match(sources: list[str], names: dict[str, object], what: str, path: Path) -> list:
    """The entry of ``names`` for each source (by path under --data, else by file name)."""
    by_base: dict[str, list] = {}
    for k, v in names.items():
        by_base.setdefault(Path(k).name, []).append(v)
    out, missing = [], []
    for s in sources:
        hit = names.get(s)
        if hit is None and len(by_base.get(Path(s).name, [])) == 1:
            hit = by_base[Path(s).name][0]
        if hit is None:
            missing.append(s)
        out.append(hit)
    if missing:
        raise ConfigError(f"--labels {path}: no {what} for {len(missing)} of the {len(sources)} images of --data, "
                          f"e.g. {missing[0]!r}", hint="every image needs its labels (or move it out of --data)")
    return out


def _coco(path: Path, got: Samples, spec: dict) -> TaskLabels:
    try:
        doc = Coco.model_validate(json.loads(_text(path, "COCO json")))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--labels {path}: not JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"--labels {path}: not JSON: nested too deeply") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
        raise ConfigError(f"--labels {path}: not a COCO instances file: {where}: {describe(err)}") from None
    _, h, w, _ = image_layout(spec)
    cats = sorted(doc.categories, key=lambda c: c.id)
    cls = {c.id: i for i, c in enumerate(cats)}
    images = _match(got.sources, {im.file_name: im for im in doc.images}, "COCO image entry", path)
    wanted = {im.id: i for i, im in enumerate(images)}
    boxes: list[list] = [[] for _ in images]
    crowd = 0
    for a in doc.annotations:
        i = wanted.get(a.image_id)
        if i is None:
            continue
        if a.category_id not in cls:
            raise ConfigError(f"--labels {path}: an annotation of image {a.image_id} has category_id "
                              f"{a.category_id}, not one of its categories")
        x, y, bw, bh = a.bbox
        if not all(math.isfinite(v) for v in a.bbox) or bw <= 0 or bh <= 0:
            raise ConfigError(f"--labels {path}: an annotation of image {a.image_id} has bbox {a.bbox}: "
                              "[x, y, width, height], finite, width and height > 0")
        if a.iscrowd:
            crowd += 1
            continue
        iw, ih = got.sizes[i]
        boxes[i].append((x * w / iw, y * h / ih, (x + bw) * w / iw, (y + bh) * h / ih, cls[a.category_id]))
    for im, (iw, ih) in zip(images, got.sizes):
        if (im.width, im.height) not in ((None, None), (iw, ih)):
            raise ConfigError(f"--labels {path}: {im.file_name} is {im.width}x{im.height} there, the file is "
                              f"{iw}x{ih}", hint="the boxes are in the image's pixels: check the file is the one "
                                                 "annotated")

    def take(idx: np.ndarray) -> dict:
        rows = [b for i in idx for b in boxes[i]]
        return {"gt_boxes": np.asarray([r[:4] for r in rows], "float32").reshape(-1, 4),
                "gt_classes": np.asarray([r[4] for r in rows], "int64"),
                "gt_counts": np.asarray([len(boxes[i]) for i in idx], "int64")}

    total = sum(len(b) for b in boxes)
    notes = [f"boxes: {total} in {len(images)} images, scaled to the input's {w}x{h} pixels"
             + (f"; {crowd} iscrowd boxes left out" if crowd else "")]
    return TaskLabels(take, {"kind": "detection", "label_names": [c.name or str(c.id) for c in cats]}, notes,
                      f"boxes of {len(cats)} categories from {path.name}")


def _mask_for(masks: Path, source: str) -> Path | None:
    for p in (masks / Path(source).with_suffix(".png"), masks / (Path(source).stem + ".png")):
        if p.is_file():
            return p
    return None


def _masks(path: Path, got: Samples, spec: dict) -> TaskLabels:
    from PIL import Image

    if not path.is_dir():
        raise ConfigError(f"--labels {path}: not a directory", hint="--task segmentation takes a folder of mask PNGs")
    _, h, w, _ = image_layout(spec)
    found = {s: _mask_for(path, s) for s in got.sources}
    _match(got.sources, {s: p for s, p in found.items() if p is not None}, "mask PNG", path)
    labels = np.empty((len(got.sources), h, w), dtype="int64")
    for i, (s, (iw, ih)) in enumerate(zip(got.sources, got.sizes)):
        m = found[s]
        try:
            with open_image(m) as im:
                if im.mode not in ("L", "P", "1", "I;16", "I"):
                    raise ConfigError(f"--labels: mask {m} is {im.mode}: a mask is one channel of class ids "
                                      f"(mode L or P), {IGNORE} ignored")
                if im.size != (iw, ih):
                    raise ConfigError(f"--labels: mask {m} is {im.size[0]}x{im.size[1]}, its image {s} {iw}x{ih}")
                labels[i] = np.asarray(im.resize((w, h), Image.Resampling.NEAREST)).astype("int64")
        except (OSError, ValueError, SyntaxError) as exc:
            raise ConfigError(f"--labels: cannot read mask {m}: {exc}") from None
    classes = sorted(int(v) for v in np.unique(labels) if v != IGNORE)
    if not classes or classes[0] < 0:
        raise ConfigError(f"--labels {path}: the masks hold no class ids (0, 1, ...; {IGNORE} is ignored)")
    notes = [f"masks: classes {classes[0]}..{classes[-1]} ({IGNORE} ignored), resized (nearest) to {h}x{w}"]
    return TaskLabels(lambda idx: {"labels": labels[idx]}, {"kind": "segmentation"}, notes,
                      f"masks of {len(classes)} classes from {path.name}/")


def _lines(path: Path) -> dict[str, str]:
    out = {}
    for n, line in enumerate(_text(path, "lines of path<TAB>text").splitlines(), 1):
        if not line.strip():
            continue
        name, sep, text = line.partition("\t") if "\t" in line else line.partition(" ")
        if not sep or not text or not name:
            raise ConfigError(f"--labels {path}:{n}: write each line as path<TAB>text")
        out[name] = text
    return out


def _ctc(path: Path, got: Samples, charset: str | None) -> TaskLabels:
    texts = _match(got.sources, _lines(path), "line", path)
    chars = charset if charset is not None else "".join(sorted(set("".join(texts))))
    if len(set(chars)) != len(chars) or not chars:
        raise ConfigError(f"--charset {chars!r}: each character once, at least one")
    ids = {c: i for i, c in enumerate(chars)}
    unknown = sorted(set("".join(texts)) - set(ids))
    if unknown:
        raise ConfigError(f"--labels {path}: characters not in --charset: {''.join(unknown)!r}")
    width = max(len(t) for t in texts)
    labels = np.full((len(texts), width), -1, dtype="int64")
    for i, t in enumerate(texts):
        labels[i, :len(t)] = [ids[c] for c in t]
    notes = [f"ctc: {len(chars)} characters (class = place in {'--charset' if charset else 'the sorted set'}), "
             f"blank = {len(chars)}; strings up to {width} long"]
    return TaskLabels(lambda idx: {"labels": labels[idx]}, {"kind": "ctc", "blank": len(chars)}, notes,
                      f"strings from {path.name}")


def task_labels(kind: str, labels: str | None, got: Samples, spec: dict, charset: str | None = None) -> TaskLabels:
    """The labels of ``kind`` for the samples ``got`` (images of input ``spec``)."""
    if labels is None:
        what = {"detection": "instances.json (COCO)", "segmentation": "DIR of mask PNGs",
                "ctc": "FILE of path<TAB>text lines"}[kind]
        raise ConfigError(f"--task {kind} needs its labels: --labels {what}")
    path = Path(labels).expanduser()
    out = (_coco(path, got, spec) if kind == "detection" else _masks(path, got, spec) if kind == "segmentation"
           else _ctc(path, got, charset))
    take = out.take

    def checked(idx: np.ndarray) -> dict:
        """The rows, checked as the build's evaluation reader checks them."""
        rows = take(idx)
        try:
            check_labels(kind, rows, len(idx))
        except ValueError as exc:
            raise ConfigError(f"--labels {path}: {exc}") from None
        return rows

    out.take = checked
    return out
