"""[preprocess]: the declared pipeline against the training-time reference transform, on real
photos (sklearn load_sample_images). A BGR declaration against an RGB reference, or nearest
against bilinear, fails the build with exit 3 naming the stage; the right one passes and the
build directory gets pipeline.json."""
from __future__ import annotations

import json

import numpy as np
import pytest

from edgeforge import api
from edgeforge.errors import PassError

MODEL = '''
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

TOML = """
name = "pre"
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


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    import importlib.util

    from PIL import Image
    from sklearn.datasets import load_sample_images

    root = tmp_path_factory.mktemp("pre") / "proj"
    (root / "data" / "images").mkdir(parents=True)
    (root / "model.py").write_text(MODEL)
    paths = []
    for i, photo in enumerate(load_sample_images().images):       # two 427x640 photos
        for j, box in enumerate(((0, 0, 640, 427), (100, 50, 500, 350))):
            p = root / "data" / "images" / f"photo{i}-{j}.jpg"
            Image.fromarray(photo).crop(box).save(p, quality=90)
            paths.append(p)
    spec = importlib.util.spec_from_file_location("pre_model", root / "model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = np.stack([mod.transform(Image.open(p)) for p in paths]).astype("float32")
    np.savez(root / "data" / "calib.npz", image=x)
    np.savez(root / "data" / "eval.npz", image=x)
    (root / "edgeforge.toml").write_text(TOML)
    return root


def _declare(root, **changes):
    text = TOML
    for k, v in changes.items():
        text = text.replace("[preprocess]\n", f"[preprocess]\n{k} = {json.dumps(v)}\n")
    (root / "edgeforge.toml").write_text(text)


def test_the_right_declaration_passes_and_writes_pipeline_json(project, tmp_path):
    _declare(project)
    b = api.build(project, "linux-x86", precision="fp32", out=tmp_path / "ok")
    pre = b.manifest["verify"]["preprocess"]
    assert pre["status"] == "passed" and pre["images"] == 4 and pre["max_abs_diff"] <= 1e-3
    assert pre["output_max_abs_diff"] <= 1e-3
    doc = json.loads((b.out_dir / "pipeline.json").read_text())
    assert doc["input"] == {"name": "image", "dtype": "float32", "shape": [-1, 3, 48, 64], "layout": "NCHW"}
    assert [s["op"] for s in doc["preprocess"]] == ["decode", "resize", "channel_order", "scale", "normalize",
                                                     "layout"]
    assert doc["labels"] == ["a", "b", "c"] and doc["postprocess"]["kind"] == "classification"


def test_bgr_against_an_rgb_reference_exits_3_naming_the_channel_order(project, tmp_path):
    from helpers import run_cli

    _declare(project, channel_order="bgr")
    res = run_cli("build", str(project), "--target", "linux-x86", "--precision", "fp32",
                  "--out", str(tmp_path / "bgr"))
    assert res.returncode == 3, res.stderr
    line = next(ln for ln in res.stderr.splitlines() if ln.startswith("error:"))
    assert "at the channel order: with channel_order = \"rgb\" it matches" in line, line
    assert "max difference" in line


def test_nearest_against_bilinear_names_the_interpolation(project, tmp_path):
    _declare(project, interpolation="nearest")
    with pytest.raises(PassError, match=r'at the interpolation: with interpolation = "bilinear" it matches; '
                                        r'as declared the max difference is \d'):
        api.build(project, "linux-x86", precision="fp32", out=tmp_path / "nearest")


def test_a_missing_mean_std_is_named(project, tmp_path):
    (project / "edgeforge.toml").write_text(TOML.replace("mean = [0.485, 0.456, 0.406]\n", "")
                                            .replace("std = [0.229, 0.224, 0.225]\n", ""))
    with pytest.raises(PassError, match=r"at the mean/std: with the ImageNet mean/std it matches"):
        api.build(project, "linux-x86", precision="fp32", out=tmp_path / "plain")
