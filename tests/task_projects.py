"""Small task projects for the [task] tests: a conv-only CTC recogniser of real digit strings
and a tiny anchor-grid detector of real digits (tests/task_models), trained for seconds."""
from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np

MODELS = Path(__file__).resolve().parent / "task_models"


def _model(name: str):
    """A module of tests/task_models."""
    import importlib

    sys.path.insert(0, str(MODELS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(MODELS))


def _toml(name: str, factory: str, weights: str, shape: list[int], task: str) -> str:
    return textwrap.dedent(f"""
        name = "{name}"
        [model]
        factory = "{factory}"
        weights = "{weights}"
        [[model.inputs]]
        name = "x"
        shape = {shape}
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        """) + (f"[task]\n{task}" if task else "")


def _write_project(root: Path, module: str, weights: dict, data: dict, toml: str) -> Path:
    """``root`` with tests/task_models/``module``.py, ``weights`` ({file: state dict}), ``data``
    ({file under data/: arrays}) and edgeforge.toml."""
    import paddle

    root.mkdir(parents=True)
    shutil.copy(MODELS / f"{module}.py", root / f"{module}.py")
    for name, state in weights.items():
        paddle.save(state, str(root / name))
    (root / "data").mkdir()
    for name, arrays in data.items():
        np.savez(root / "data" / name, **arrays)
    (root / "edgeforge.toml").write_text(toml)
    return root


def ctc_project(root: Path, task: str = 'kind = "ctc"\nblank = 10\nmax_metric_drop = 5\n') -> Path:
    ctc_digits = _model("ctc_digits")
    x, labels = ctc_digits.strings(96, seed=5)
    # its 400 steps, however long they take: a wall-time cap gave fewer steps on a loaded host
    # (134 at load 14 on 2 cores) and a float sequence accuracy of 0.19, under the tests' 0.2
    return _write_project(root, "ctc_digits", {"ctc.pdparams": ctc_digits.train(seconds=600).state_dict()},
                          {"calib.npz": {"x": ctc_digits.strings(64, seed=3)[0]}, "eval.npz": {"x": x, "labels": labels}},
                          _toml("ctc-digits", "ctc_digits:build", "ctc.pdparams", [-1, 1, 8, 32], task))


def segmenter_project(root: Path) -> Path:
    """A tiny segmenter of real digits (tests/task_models/tiny_segmenter.py) with masks."""
    seg = _model("tiny_segmenter")
    x, masks = seg.scenes(64, seed=5)
    return _write_project(root, "tiny_segmenter", {"seg.pdparams": seg.train().state_dict()},
                          {"calib.npz": {"x": seg.scenes(64, seed=3)[0]}, "eval.npz": {"x": x, "labels": masks}},
                          _toml("tiny-seg", "tiny_segmenter:build", "seg.pdparams", [-1, 1, 32, 32],
                                'kind = "segmentation"\nmax_metric_drop = 10\n'))


FACTORIES = {False: "build", True: "build_with_nms", "matrix": "build_with_nms", "multiclass": "build_with_nms3"}


def detector_project(root: Path, nms: bool | str = False) -> Path:
    """``nms``: True or "matrix": matrix_nms in the graph (rows [M, 6] + counts [N]);
    "multiclass": PaddleDetection's multiclass_nms3 in the graph; False: raw outputs."""
    import paddle

    sys.path.insert(0, str(MODELS))
    try:
        import tiny_detector as det
    finally:
        sys.path.remove(str(MODELS))
    root.mkdir(parents=True)
    shutil.copy(MODELS / "tiny_detector.py", root / "tiny_detector.py")
    # a fixed number of steps, not 8 s of wall time: a loaded host got an under-trained model
    # (float mAP 0.0-0.05 at load 10-17) and the mAP tests failed on it
    state = det.train(seconds=600, steps=100).state_dict()
    paddle.save({f"det.{k}" if nms else k: v for k, v in state.items()}, str(root / "det.pdparams"))
    (root / "data").mkdir()
    x, boxes, classes, counts = det.scenes(64, seed=5)
    np.savez(root / "data" / "calib.npz", x=det.scenes(64, seed=3)[0])
    np.savez(root / "data" / "eval.npz", x=x, gt_boxes=boxes, gt_classes=classes, gt_counts=counts)
    (root / "edgeforge.toml").write_text(textwrap.dedent("""
        name = "tiny-det"
        [model]
        factory = "tiny_detector:{factory}"
        weights = "det.pdparams"
        [[model.inputs]]
        name = "x"
        shape = [-1, 1, 32, 32]
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        [task]
        kind = "detection"
        max_metric_drop = 10
        """).replace("{factory}", FACTORIES[nms]))
    return root


def dfl_project(root: Path) -> Path:
    """The digits classifier with a rank-1 ``matmul_v2`` weight (tests/task_models/dfl_digits.py)."""
    dfl_digits = _model("dfl_digits")
    x, y = dfl_digits.digits()
    return _write_project(root, "dfl_digits", {"weights.pdparams": dfl_digits.train().state_dict()},
                          {"calib.npz": {"x": x[-160:-96]}, "eval.npz": {"x": x[-96:], "labels": y[-96:]}},
                          _toml("dfl-digits", "dfl_digits:build", "weights.pdparams", [-1, 1, 8, 8], ""))


PHOTO_MODEL = '''
import numpy as np
import paddle
import paddle.nn as nn
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], "float32")
STD = np.array([0.229, 0.224, 0.225], "float32")


def transform(img):
    """The training-time transform: RGB, bilinear to 48x64, /255, ImageNet mean/std, CHW."""
    a = np.asarray(img.convert("RGB").resize((64, 48), Image.BILINEAR), dtype="float32") / 255.0
    return ((a - MEAN) / STD).transpose(2, 0, 1)


def build():
    paddle.seed(0)
    return nn.Sequential(nn.Conv2D(3, 4, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2D(1), nn.Flatten(),
                         nn.Linear(4, 3))
'''

PHOTO_TOML = """
name = "photo"
[model]
factory = "model:build"
[[model.inputs]]
name = "image"
shape = [-1, 3, 48, 64]
[data]
calibration = "data/calib.npz"
evaluation = "data/eval.npz"
[task]
label_names = ["a", "b", "c"]
[preprocess]
input = "image"
images = "data/images"
reference = "model:transform"
resize = [48, 64]
mean = [0.485, 0.456, 0.406]
std = [0.229, 0.224, 0.225]
"""


def photo_project(root: Path, extra: str = "") -> Path:
    """A small classifier of real photos (sklearn's two sample images, four JPEG crops) with
    its [preprocess] and training-time transform; ``extra``: more toml (e.g. [postprocess])."""
    import importlib.util

    from PIL import Image
    from sklearn.datasets import load_sample_images

    (root / "data" / "images").mkdir(parents=True)
    (root / "model.py").write_text(PHOTO_MODEL)
    paths = []
    for i, photo in enumerate(load_sample_images().images):       # two 427x640 photos
        for j, box in enumerate(((0, 0, 640, 427), (100, 50, 500, 350))):
            p = root / "data" / "images" / f"photo{i}-{j}.jpg"
            Image.fromarray(photo).crop(box).save(p, quality=90)
            paths.append(p)
    spec = importlib.util.spec_from_file_location("photo_model", root / "model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = np.stack([mod.transform(Image.open(p)) for p in paths]).astype("float32")
    np.savez(root / "data" / "calib.npz", image=x)
    np.savez(root / "data" / "eval.npz", image=x)
    (root / "edgeforge.toml").write_text(PHOTO_TOML + extra)
    return root
