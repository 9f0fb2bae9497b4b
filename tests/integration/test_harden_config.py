"""issue 19, config strictness, through the real CLI: a misspelled key is named with the closest
valid one, values are not coerced (``shape = [3.0]``, ``port = "22"``), target names are names
(no path separators), and pattern errors say in words what is allowed."""
from __future__ import annotations

import pytest

from helpers import copy_project, run_cli
from test_errors import assert_clean_failure


@pytest.fixture
def project(digits_project, tmp_path):
    return copy_project(digits_project, tmp_path / "proj")


def _edit(project, old, new):
    toml = project / "edgeforge.toml"
    text = toml.read_text()
    assert old in text
    toml.write_text(text.replace(old, new))
    return toml.read_text()


def _build(project, tmp_path, target="jetson-orin"):
    out = tmp_path / "out"
    return run_cli("build", str(project), "--target", target, "--out", str(out)), out


def test_misspelled_required_key_names_it_and_the_closest(project, tmp_path):
    before = _edit(project, "factory =", "factroy =")
    res, out = _build(project, tmp_path)
    # factory is one of two ways to give the model (factory or inference): the misspelling is named
    assert_clean_failure(res, 2, "unknown key 'model.factroy' (did you mean 'factory'?)", out=out)
    assert (project / "edgeforge.toml").read_text() == before


def test_float_dimension_is_refused(project, tmp_path):
    _edit(project, "shape = [-1, 1, 32, 32]", "shape = [-1, 1.0, 32, 32]")
    res, out = _build(project, tmp_path)
    assert_clean_failure(res, 2, "model.inputs.0.shape.1: Input should be a valid integer (got 1.0)", out=out)


def test_pattern_errors_say_in_words_what_is_allowed(project, tmp_path):
    _edit(project, "model:DigitsNet", "model.DigitsNet")
    res, out = _build(project, tmp_path)
    line, _ = assert_clean_failure(res, 2, "model.factory: must be module:callable", "(got 'model.DigitsNet')",
                                   out=out)
    assert "^[" not in line and "\\w" not in line


@pytest.mark.parametrize("name", ["../targets/rpi4", "targets/rpi4", "..\\rpi4", ".hidden"])
def test_target_names_with_path_separators_are_refused(project, tmp_path, name):
    res, out = _build(project, tmp_path, target=name)
    assert_clean_failure(res, 2, f"target name {name!r} is not a name", "no path separators", out=out)


def test_string_port_in_devices_toml_is_refused(tmp_path):
    inv = tmp_path / "devices.toml"
    inv.write_text('[devices.pi]\nhost = "pi.local"\nport = "22"\ntarget = "rpi4"\nworkdir = "/tmp/ef"\n')
    res = run_cli("devices", "--inventory", str(inv))
    assert_clean_failure(res, 2, "[devices.pi]: port: Input should be a valid integer (got '22')")


def test_device_name_pattern_in_words(tmp_path):
    inv = tmp_path / "devices.toml"
    inv.write_text('[devices."pi/3"]\nhost = "pi.local"\ntarget = "rpi4"\nworkdir = "/tmp/ef"\n')
    res = run_cli("devices", "--inventory", str(inv))
    line, _ = assert_clean_failure(res, 2, "name: must be letters, digits, '_', '.' and '-'")
    assert "^[" not in line
