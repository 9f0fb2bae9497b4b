"""`[model] inference = "prefix"`: an exported inference model, legacy (prefix.pdmodel +
.pdiparams, written here with paddle.jit.save as PaddleClas' export_model does) or PIR
(prefix.json), is the model of a project with no factory and no weights (issues 25 and 27)."""
from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from edgeforge import api
from edgeforge.project import load_project
from helpers import run_cli
from inference_export import export_digits


@pytest.fixture(scope="module")
def exported(digits_project, tmp_path_factory) -> Path:
    return export_digits(digits_project, tmp_path_factory.mktemp("export") / "inference")


def _project(root: Path, digits_project: Path, prefix: Path, inputs: str = "") -> Path:
    root.mkdir(parents=True)
    shutil.copytree(digits_project / "data", root / "data")
    (root / "edgeforge.toml").write_text(textwrap.dedent(f"""\
        name = "digits-inference"
        [model]
        inference = "{prefix}"
        {inputs}
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        """))
    return root


def test_inputs_come_from_the_program(exported, digits_project, tmp_path):
    proj = load_project(_project(tmp_path / "p", digits_project, exported))
    assert [s.model_dump() for s in proj.inputs] == [{"name": "x", "shape": [-1, 1, 32, 32], "dtype": "float32"}]
    files = {p.name for p in proj.source_files()}
    assert {"inference.pdmodel", "inference.pdiparams"} <= files      # both digested into the key


def test_builds_for_linux_x86_from_the_cli(exported, digits_project, tmp_path):
    root = _project(tmp_path / "p", digits_project, exported)
    res = run_cli("build", "--target", "linux", "--out", str(tmp_path / "out"), "-q", cwd=root)
    assert res.returncode == 0, res.stderr
    assert "linux → linux-x86" in res.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["verify"]["status"] == "passed"
    assert "exported inference model" in manifest["export"]["program"]


@pytest.mark.parametrize("target", ["jetson-orin", pytest.param("rpi4", marks=pytest.mark.needs_lite)])
def test_builds_for_jetson_and_rpi(exported, digits_project, tmp_path, target):
    root = _project(tmp_path / "p", digits_project, exported)
    result = api.build(root, target, out=tmp_path / "out")
    assert result.verify_status in ("passed", "device-only"), result.manifest["verify"]
    assert result.manifest["target"] == target


def test_narrowed_inputs_must_agree(exported, digits_project, tmp_path):
    ok = _project(tmp_path / "ok", digits_project, exported,
                  '[[model.inputs]]\nname = "x"\nshape = [8, 1, 32, 32]\ndtype = "float32"')
    assert load_project(ok).inputs[0].shape == [8, 1, 32, 32]
    bad = _project(tmp_path / "bad", digits_project, exported,
                   '[[model.inputs]]\nname = "x"\nshape = [-1, 1, 28, 28]\ndtype = "float32"')
    res = run_cli("build", str(bad), "--target", "linux-x86", "--out", str(tmp_path / "o"))
    assert res.returncode == 2, res.stderr
    assert "input 'x' has shape [-1, 1, 28, 28] in [[model.inputs]], the program takes [-1, 1, 32, 32]" \
        in res.stderr
    assert "Traceback" not in res.stderr


@pytest.fixture(scope="module")
def exported_pir(digits_project, tmp_path_factory) -> Path:
    prefix = export_digits(digits_project, tmp_path_factory.mktemp("pir") / "inference", pir=True)
    assert prefix.with_suffix(".json").is_file() and not prefix.with_suffix(".pdmodel").exists()
    return prefix


@pytest.mark.parametrize("target", ["linux-x86", "jetson-orin"])
def test_a_pir_program_builds_for_the_onnx_targets(exported_pir, digits_project, tmp_path, target):
    root = _project(tmp_path / "p", digits_project, exported_pir)
    proj = load_project(root)
    assert [s.model_dump() for s in proj.inputs] == [{"name": "x", "shape": [-1, 1, 32, 32], "dtype": "float32"}]
    assert {"inference.json", "inference.pdiparams"} <= {p.name for p in proj.source_files()}
    result = api.build(root, target, out=tmp_path / "out", precision="fp32")
    assert result.verify_status == "passed", result.manifest["verify"]
    assert result.manifest["export"]["route"] == "pir"
    assert result.manifest["verify"]["rel_max_abs_error"] < 1e-4


@pytest.mark.parametrize("family", ["rpi", "android"])
def test_a_pir_program_goes_to_the_onnx_backend_of_a_lite_target(exported_pir, digits_project, tmp_path, family):
    """rpi4 and android-arm64 default to Paddle Lite, which reads no PIR program; both offer
    ONNX Runtime: the build takes it and the line after the family's says so (issue 45)."""
    root = _project(tmp_path / "p", digits_project, exported_pir)
    res = run_cli("build", "--target", family, "--out", str(tmp_path / "out"), "-q", cwd=root)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines[1].startswith("backend: onnx, not ") and "inference.json is PIR" in lines[1], lines
    assert "Traceback" not in res.stderr and "onnxruntime" not in "\n".join(lines[2:]), res.stderr
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert (m["backend"], m["export"]["route"], m["verify"]["status"]) == ("onnx", "pir", "passed"), m["verify"]
    assert m["backend_reason"] == lines[1] and m["precision"] == "int8"


def test_a_pir_program_for_lite_is_refused_naming_what_works(exported_pir, digits_project, tmp_path):
    root = _project(tmp_path / "p", digits_project, exported_pir)
    res = run_cli("build", "--target", "rpi4", "--backend", "lite", "--out", str(tmp_path / "o"), cwd=root)
    assert res.returncode == 2, res.stderr          # android-armv7's line: tests/unit/test_pick_backend.py
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "inference.json is a PIR program" in errors[0], res.stderr
    assert "edgeforge export --factory MODULE:CLASS" in errors[0] and "Traceback" not in res.stderr
    assert "edgeforge build --target rpi4 --backend onnx" in errors[0] and not (tmp_path / "o").exists()
    check = run_cli("check", "--target", "rpi4", cwd=root)         # the pre-flight reads legacy programs
    assert check.returncode == 2 and "is a PIR program (.json), which has no pre-flight" in check.stderr, check.stderr


def test_factory_and_inference_together_is_a_config_error(exported, digits_project, tmp_path):
    root = _project(tmp_path / "p", digits_project, exported)
    toml = root / "edgeforge.toml"
    toml.write_text(toml.read_text().replace("[model]\n", '[model]\nfactory = "model:DigitsNet"\n'))
    res = run_cli("check", str(root), "--target", "linux-x86")
    assert res.returncode == 2 and "exactly one of factory" in res.stderr, res.stderr


def test_a_program_paddle_cannot_load_is_one_line(digits_project, tmp_path):
    prefix = tmp_path / "bad" / "inference"
    prefix.parent.mkdir()
    prefix.with_suffix(".pdmodel").write_bytes(b"\x07not a program" * 50)
    prefix.with_suffix(".pdiparams").write_bytes(b"\x00" * 64)
    res = run_cli("init", str(tmp_path / "new"), "--from-inference", str(prefix))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"error: --from-inference {prefix}: Paddle cannot load it" in res.stderr
    assert not (tmp_path / "new" / "edgeforge.toml").exists()
    missing = run_cli("init", str(tmp_path / "new"), "--from-inference", str(tmp_path / "bad"))
    assert missing.returncode == 2 and f"name the prefix, not the directory: {prefix}" in missing.stderr
