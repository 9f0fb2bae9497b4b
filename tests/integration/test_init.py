"""`edgeforge init`: a working edgeforge.toml from an exported inference model or a factory, and
the data files from a folder of images or arrays (issue 27)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgeforge.errors import ConfigError
from edgeforge.init import DataSource, ModelSource, init_project, parse_input
from helpers import run_cli
from inference_export import export_digits


@pytest.fixture(scope="module")
def exported(digits_project, tmp_path_factory) -> Path:
    return export_digits(digits_project, tmp_path_factory.mktemp("export") / "inference")


@pytest.fixture(scope="module")
def pngs(tmp_path_factory) -> Path:
    """sklearn's 8x8 digits as grayscale PNGs in one sub-folder per class (300 of them)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    root = tmp_path_factory.mktemp("pngs")
    d = load_digits()
    for i, (img, t) in enumerate(zip(d.images[:300], d.target[:300])):
        (root / str(t)).mkdir(exist_ok=True)
        Image.fromarray((img * 255 / 16).round().astype("uint8"), "L").save(root / str(t) / f"{i}.png")
    return root


def test_init_from_inference_and_pngs_then_build(exported, pngs, tmp_path):
    """The done-when: in an empty directory, init then `edgeforge build --target linux-x86`."""
    work = tmp_path / "new"
    work.mkdir()
    res = run_cli("init", "--from-inference", str(exported), "--data", str(pngs), "--resample", "nearest",
                  cwd=work)
    assert res.returncode == 0, res.stderr
    assert "input x: [-1, 1, 32, 32] float32" in res.stdout
    assert "pre-processing: grayscale, resize to 32x32 (nearest), scale to [0,1], no mean/std" in res.stdout
    assert "labels from 10 sub-folders" in res.stdout
    assert "next: edgeforge build --target linux-x86" in res.stdout
    with np.load(work / "data" / "calib.npz") as c, np.load(work / "data" / "eval.npz") as e:
        assert c["x"].shape[1:] == (1, 32, 32) and len(c["x"]) + len(e["x"]) == 300
        assert 90 <= len(c["x"]) <= 100 and "labels" in e.files and "labels" not in c.files
        assert 0.0 <= c["x"].min() and c["x"].max() <= 1.0
    build = run_cli("build", "--target", "linux-x86", "-q", cwd=work)
    assert build.returncode == 0, build.stderr
    again = run_cli("init", "--from-inference", str(exported), cwd=work)
    assert again.returncode == 2
    assert "init never overwrites a file: edgeforge.toml exists" in again.stderr


def test_init_refuses_an_existing_data_file_before_writing(exported, pngs, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "eval.npz").write_bytes(b"mine")
    with pytest.raises(ConfigError, match="never overwrites a file: .*data/eval.npz exists"):
        init_project(tmp_path, ModelSource(from_inference=str(exported)), DataSource(str(pngs)))
    assert not (tmp_path / "edgeforge.toml").exists()
    assert (tmp_path / "data" / "eval.npz").read_bytes() == b"mine"


FACTORY = textwrap.dedent("""
    import paddle
    from paddle.static import InputSpec

    class Spec(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = paddle.nn.Linear(6, 3)

        @paddle.jit.to_static(input_spec=[InputSpec([None, 6], "float32", "feats")])
        def forward(self, feats):
            return self.fc(feats)

    class Plain(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc = paddle.nn.Linear(6, 3)

        def forward(self, feats):
            return self.fc(feats)
    """)


@pytest.mark.slow
def test_init_factory_reads_inputspecs_or_asks(tmp_path):
    (tmp_path / "model.py").write_text(FACTORY)
    arrays = tmp_path / "arrays"
    arrays.mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        np.save(arrays / f"{i}.npy", rng.normal(size=(3, 6)).astype("float32"))    # 3 samples each
    res = init_project(tmp_path, ModelSource(factory="model:Spec"), DataSource(str(arrays)))
    assert res.inputs == [{"name": "feats", "shape": [-1, 6], "dtype": "float32"}]
    assert any("weights: none given" in m for m in res.missing)
    assert any("no labels" in n for n in res.notes)
    with np.load(tmp_path / "data" / "calib.npz") as c, np.load(tmp_path / "data" / "eval.npz") as e:
        assert (len(c["feats"]), len(e["feats"])) == (4, 8) and "labels" not in e.files
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.py").write_text(FACTORY)
    res = run_cli("init", str(other), "--factory", "model:Plain")
    assert res.returncode == 2 and "declares no InputSpec" in res.stderr and "--input" in res.stderr
    res = run_cli("init", str(other), "--factory", "model:Plain", "--input", "feats:-1,6:float32")
    assert res.returncode == 0, res.stderr
    assert f"next: edgeforge build {other} --target linux-x86" in res.stdout
    check = run_cli("check", str(other), "--target", "linux-x86")      # the toml it wrote loads
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("text, fragment", [("x", "name:shape:dtype"), ("x:1,a:float32", "integers"),
                                            ("x:1,0", "positive"), ("x:1,2:complex", "dtype")])
def test_bad_input_flags(text, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_input(text)
    assert parse_input("x:-1,3,224,224") == {"name": "x", "shape": [-1, 3, 224, 224], "dtype": "float32"}
