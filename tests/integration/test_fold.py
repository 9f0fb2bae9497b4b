"""[preprocess] fold = true: cast, scale, mean/std and layout go into the graph, so the artifact
takes uint8 NHWC [-1, H, W, 3] (the decoded, resized photo); ONNX and Paddle Lite artifacts
take the same bytes and verify checks both against the unfolded model (the factory's layer on
the pipeline's float tensors). Real photos (sklearn load_sample_images)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from task_projects import photo_project

from edgeforge import api
from edgeforge.errors import ConfigError


def _bytes(root):
    """The photos as the app feeds them: RGB, bilinear to 48x64, uint8 [N, 48, 64, 3]."""
    from PIL import Image

    out = []
    for p in sorted((root / "data" / "images").iterdir()):
        with Image.open(p) as img:
            out.append(np.asarray(img.convert("RGB").resize((64, 48), Image.BILINEAR), dtype=np.uint8))
    return np.stack(out)


@pytest.fixture(scope="module")
def folded(tmp_path_factory):
    root = photo_project(tmp_path_factory.mktemp("fold") / "proj")
    toml = (root / "edgeforge.toml").read_text().replace("[preprocess]\n", "[preprocess]\nfold = true\n")
    (root / "edgeforge.toml").write_text(toml)
    x = _bytes(root)
    np.savez(root / "data" / "calib.npz", image=x)
    np.savez(root / "data" / "eval.npz", image=x)
    return root


def _check_fold(manifest, tol=1e-4):
    f = manifest["verify"]["fold"]
    assert f["input"] == {"name": "image", "dtype": "uint8", "layout": "NHWC"}
    assert f["unfolded_input"] == {"shape": [-1, 3, 48, 64], "layout": "NCHW"}
    assert f["program_vs_unfolded"]["rel_max_abs_error"] <= 1e-4
    return f["artifact_vs_unfolded"]


def test_onnx_artifact_takes_uint8_nhwc_and_verifies_against_the_unfolded_model(folded, tmp_path):
    import onnx

    b = api.build(folded, "linux-x86", precision="fp32", out=tmp_path / "onnx")
    assert b.verify_status == "passed"
    model = onnx.load(str(b.out_dir / b.manifest["artifact"]["path"]))
    [inp] = model.graph.input
    dims = [d.dim_value or -1 for d in inp.type.tensor_type.shape.dim]
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.UINT8 and dims == [-1, 48, 64, 3]
    a = _check_fold(b.manifest)
    assert a["rel_max_abs_error"] <= 1e-4 and a["cosine"] > 0.99999
    doc = json.loads((b.out_dir / "pipeline.json").read_text())
    assert doc["input"] == {"name": "image", "dtype": "uint8", "shape": [-1, 48, 64, 3], "layout": "NHWC"}
    assert [s["op"] for s in doc["preprocess"]] == ["decode", "resize"]
    assert [s["op"] for s in doc["folded"]] == ["channel_order", "scale", "normalize", "layout"]


def test_onnx_int8_folded(folded, tmp_path):
    b = api.build(folded, "linux-x86", out=tmp_path / "int8")
    assert b.manifest["precision"] == "int8" and b.verify_status == "passed"
    assert _check_fold(b.manifest)["cosine"] > 0.99


@pytest.mark.needs_lite
def test_lite_artifact_takes_the_same_bytes(folded, tmp_path):
    from edgeforge.passes.lite import lite_outputs

    b = api.build(folded, "linux-x86", backend="lite", precision="fp32", out=tmp_path / "lite")
    assert b.verify_status == "passed"
    a = _check_fold(b.manifest)
    assert a["rel_max_abs_error"] <= 1e-4
    # the same uint8 bytes through the .nb, in a child
    x = _bytes(folded)
    _, outs = lite_outputs("test", str(b.out_dir / b.manifest["artifact"]["path"]), ["image"], {"image": x},
                           tmp_path / "lite.log")
    with np.load(b.out_dir / "reference" / "float_outputs.npz") as z:
        ref = z["output_0"]
    assert np.max(np.abs(outs[0] - ref)) <= 1e-4 * max(1.0, float(np.max(np.abs(ref))))


def test_float_data_for_a_folded_input_is_named(folded, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(folded, bad)
    x = _bytes(folded).astype("float32")
    np.savez(bad / "data" / "calib.npz", image=x)
    np.savez(bad / "data" / "eval.npz", image=x)
    with pytest.raises(ConfigError, match="has dtype float32, the model input wants uint8"):
        api.build(bad, "linux-x86", precision="fp32", out=tmp_path / "out")


def test_fold_refusals(folded, tmp_path):
    from edgeforge.project import load_project

    other = tmp_path / "shape"
    shutil.copytree(folded, other)
    toml = (other / "edgeforge.toml").read_text()
    (other / "edgeforge.toml").write_text(toml.replace("shape = [-1, 3, 48, 64]", "shape = [-1, 3, 32, 32]"))
    with pytest.raises(ConfigError, match=r"fold = true: input image is float32 \[-1, 3, 32, 32\]; the "
                                          r"pre-processing gives float32 \[-1, 3, 48, 64\] \(NCHW\)"):
        load_project(other)
    (other / "edgeforge.toml").write_text(toml.replace('factory = "model:build"', 'inference = "exported/model"'))
    with pytest.raises(ConfigError, match="fold = true needs \\[model\\] factory"):
        load_project(other)


def test_fold_is_part_of_the_export_key(folded, tmp_path):
    """The same model folded and unfolded are two programs: neither is the other's cache hit."""
    from edgeforge.api import project_artifact
    from edgeforge.project import load_project

    plain = tmp_path / "plain"
    shutil.copytree(folded, plain)
    (plain / "edgeforge.toml").write_text((folded / "edgeforge.toml").read_text().replace("fold = true\n", ""))
    assert project_artifact(load_project(plain)).digest != project_artifact(load_project(folded)).digest


def _forward(x: np.ndarray, root) -> np.ndarray:
    """The declared pipeline after decode and resize: the model's float inputs (NCHW)."""
    from edgeforge.project import load_project

    pre = load_project(root).spec.preprocess
    y = x.astype(np.float32)
    if pre.channel_order == "bgr":
        y = y[..., ::-1]
    y = (y * np.float32(pre.scale) - np.asarray(pre.mean, np.float32)) / np.asarray(pre.std, np.float32)
    return np.ascontiguousarray(np.transpose(y, (0, 3, 1, 2)).astype(np.float32))


def test_float_inputs_of_the_model_are_kept_under_fold(folded, tmp_path):
    """A project whose data are the model's float inputs (normalized): with fold = true they are
    mapped back through the declared pipeline to the uint8 images the artifact takes, and an
    unlabelled set that does not map back comes from [preprocess] images (issue 46)."""
    floats = tmp_path / "floats"
    shutil.copytree(folded, floats)
    x = _bytes(folded)
    y = _forward(x, folded)
    assert y.min() < 0                                   # normalized: astype('uint8') would ruin them
    np.savez(floats / "data" / "calib.npz", image=y + np.float32(0.3))      # not from whole pixels
    np.savez(floats / "data" / "eval.npz", image=y)
    b = api.build(floats, "linux-x86", precision="fp32", out=tmp_path / "out")
    assert b.verify_status == "passed"
    with np.load(b.out_dir / "reference" / "eval_inputs.npz") as z:
        assert z["image"].dtype == np.uint8 and np.array_equal(z["image"], x)


def test_float_inputs_that_do_not_map_back_name_the_fix(folded, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(folded, bad)
    y = _forward(_bytes(folded), folded) + np.float32(0.3)
    np.savez(bad / "data" / "eval.npz", image=y, labels=np.zeros(len(y), np.int64))
    with pytest.raises(ConfigError) as exc:
        api.build(bad, "linux-x86", precision="fp32", out=tmp_path / "out")
    line = exc.value.one_line()
    assert "holds the model's float inputs" in line and "uint8 [N, 48, 64, 3]" in line
    assert "astype('uint8')" not in line and "fold = false" in line
