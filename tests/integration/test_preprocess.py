"""[preprocess]: the declared pipeline against the training-time reference transform, on real
photos (sklearn load_sample_images). A BGR declaration against an RGB reference, or nearest
against bilinear, fails the build with exit 3 naming the stage; the right one passes and the
build directory gets pipeline.json."""
from __future__ import annotations

import json

import pytest

from task_projects import PHOTO_TOML, photo_project

from edgeforge import api
from edgeforge.errors import PassError

TOML = PHOTO_TOML


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return photo_project(tmp_path_factory.mktemp("pre") / "proj")


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
