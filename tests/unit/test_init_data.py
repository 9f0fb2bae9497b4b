"""`edgeforge init --data`: images and arrays into the calibration and evaluation files (no Paddle:
edgeforge.init_data is numpy + Pillow) (issue 27)."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from edgeforge.errors import ConfigError
from edgeforge.init_data import DataSource
from edgeforge.init_data import make_data as _make


def make_data(folder, inputs, calib, evals, **kw):
    """make_data, its files written where the old signature wrote them."""
    rep, files = _make(DataSource(str(folder), **kw), inputs, "c", "e")
    calib.write_bytes(files["c"])
    evals.write_bytes(files["e"])
    return rep


def _rgb_folder(root, per_class=3):
    for k, colour in enumerate([(255, 0, 0), (0, 0, 255)]):
        (root / f"class{k}").mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (20, 10), colour).save(root / f"class{k}" / f"{i}.jpg" if i % 2 else
                                                     root / f"class{k}" / f"{i}.png")
    return root


def test_rgb_images_nhwc_with_mean_and_std(tmp_path):
    src = _rgb_folder(tmp_path / "imgs")
    spec = {"name": "img", "shape": [-1, 8, 8, 3], "dtype": "float32"}
    rep = make_data(src, [spec], tmp_path / "c.npz", tmp_path / "e.npz", mean="0.5", std="0.5,0.5,0.25")
    assert rep.classes == ["class0", "class1"] and (rep.calibration, rep.evaluation) == (2, 4)
    assert rep.preprocessing == ("RGB, resize to 8x8 (bilinear), scale to [0,1], mean [0.5, 0.5, 0.5] / "
                                 "std [0.5, 0.5, 0.25], NHWC float32")
    with np.load(tmp_path / "e.npz") as e:
        assert e["img"].shape == (4, 8, 8, 3) and sorted(e["labels"].tolist()) == [0, 0, 1, 1]
        red = e["img"][e["labels"] == 0][0]
        assert red[0, 0, 0] == pytest.approx(1.0, abs=0.02) and red[0, 0, 2] == pytest.approx(-2.0, abs=0.1)


def test_npz_files_for_two_inputs_no_labels(tmp_path):
    src = tmp_path / "arrays"
    src.mkdir()
    rng = np.random.default_rng(1)
    for i in range(3):
        np.savez(src / f"{i}.npz", a=rng.normal(size=(2, 4)), b=np.arange(3, dtype="int64"))    # b: one sample
    specs = [{"name": "a", "shape": [-1, 4], "dtype": "float32"}, {"name": "b", "shape": [-1, 3], "dtype": "int64"}]
    with pytest.raises(ConfigError, match="disagree on the number of samples"):
        make_data(src, specs, tmp_path / "c.npz", tmp_path / "e.npz")
    for i in range(3):
        np.savez(src / f"{i}.npz", a=rng.normal(size=(2, 4)), b=np.zeros((2, 3), dtype="int64"))
    rep = make_data(src, specs, tmp_path / "c.npz", tmp_path / "e.npz")
    assert rep.classes == [] and (rep.calibration, rep.evaluation) == (2, 4)
    with np.load(tmp_path / "c.npz") as c:
        assert c["a"].dtype == np.float32 and c["b"].dtype == np.int64 and "labels" not in c.files


@pytest.mark.parametrize("setup, fragment", [
    ("mixed", "both images and arrays"),
    ("empty", "no images"),
    ("two", "cannot be split 1:2"),
    ("free", "fixed height and width"),
])
def test_data_folders_refused_in_one_line(tmp_path, setup, fragment):
    src = tmp_path / "d"
    src.mkdir()
    spec = {"name": "x", "shape": [-1, 1, 8, 8], "dtype": "float32"}
    if setup == "mixed":
        Image.new("L", (8, 8)).save(src / "a.png")
        np.save(src / "b.npy", np.zeros((1, 8, 8), "float32"))
    elif setup == "two":
        for i in range(2):
            Image.new("L", (8, 8)).save(src / f"{i}.png")
    elif setup == "free":
        Image.new("L", (8, 8)).save(src / "a.png")
        spec = dict(spec, shape=[-1, 1, -1, -1])
    with pytest.raises(ConfigError, match=fragment):
        make_data(src, [spec], tmp_path / "c.npz", tmp_path / "e.npz")
    assert not (tmp_path / "c.npz").exists()


def test_mean_and_std_are_rounded_for_people(tmp_path):
    src = _rgb_folder(tmp_path / "imgs")
    spec = {"name": "img", "shape": [-1, 3, 8, 8], "dtype": "float32"}
    rep = make_data(src, [spec], tmp_path / "c.npz", tmp_path / "e.npz", mean="0.485,0.456,0.406",
                    std="0.229,0.224,0.225")
    assert "mean [0.485, 0.456, 0.406] / std [0.229, 0.224, 0.225]" in rep.preprocessing
