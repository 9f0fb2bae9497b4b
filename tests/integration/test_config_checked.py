"""issue 44: config checked where it is read. Every number of [preprocess] is finite and bounded
at load time, an input name the manifest would refuse is refused before any pass runs, and
[postprocess]'s output indices and a CTC blank are checked against export's probe, before
quantize: exit 2 naming the key, through the real CLI and the real model."""
from __future__ import annotations

import pytest
from task_projects import ctc_project

from edgeforge import api
from edgeforge.errors import ConfigError
from helpers import copy_project, run_cli
from test_errors import assert_clean_failure

PRE = '\n[preprocess]\ninput = "x"\nimages = "images"\n'


@pytest.fixture
def project(digits_project, tmp_path):
    return copy_project(digits_project, tmp_path / "proj")


def _append(project, text):
    toml = project / "edgeforge.toml"
    toml.write_text(toml.read_text() + text)


@pytest.mark.parametrize("lines, key", [
    ("resize = [32, 32]\nmean = [nan, 0.0, 0.0]", "preprocess.mean.0: Input should be a finite number (got nan)"),
    ("resize = [32, 32]\nstd = [inf, 1.0, 1.0]", "preprocess.std.0: Input should be a finite number (got inf)"),
    ("resize = [32, 32]\nscale = 1e308", "preprocess.scale: Input should be less than or equal to 10000"),
    ("resize = [16384, 16384]", "preprocess.resize.0: Input should be less than or equal to 8192"),
    ("resize = [8192, 8192]", "resize = [8192, 8192] is 67108864 pixels; at most 16777216"),
    ("resize_short = 64\ncrop = [8000, 8000]", "preprocess: crop = [8000, 8000] is 64000000 pixels; at most 16777216"),
    ("resize = [32, 32]\nstd = [0.0, 1.0, 1.0]", "preprocess.std.0: Input should be greater than or equal to"),
])
def test_preprocess_numbers_are_finite_and_bounded_at_load(project, tmp_path, lines, key):
    _append(project, PRE + lines + "\n")
    out = tmp_path / "out"
    res = run_cli("build", str(project), "--target", "linux-x86", "--out", str(out))
    assert_clean_failure(res, 2, key, out=out)


def test_an_input_name_with_a_quote_is_refused_before_any_pass(project, tmp_path):
    toml = project / "edgeforge.toml"
    toml.write_text(toml.read_text().replace('name = "x"', 'name = "x\\"y"'))
    out = tmp_path / "out"
    res = run_cli("build", str(project), "--target", "linux-x86", "--out", str(out))
    assert_clean_failure(res, 2, "model.inputs.0.name: Value error, must be a tensor name", "(got 'x\"y')", out=out)
    assert "export" not in res.stdout           # no pass started


def _passes_started(project, tmp_path):
    started = []
    with pytest.raises(ConfigError) as exc:
        api.build(project, "linux-x86", out=tmp_path / "out",
                  on_event=lambda name, phase, info: started.append(name) if phase == "start" else None)
    assert not (tmp_path / "out").exists()
    return str(exc.value), started


def test_postprocess_output_beyond_the_models_is_refused_after_export(project, tmp_path):
    _append(project, '\n[postprocess]\nop = "topk"\noutput = 3\n')
    msg, started = _passes_started(project, tmp_path)
    assert "[postprocess] output = 3, but the model has 1 output(s) (0..0)" in msg
    assert started == ["export"]                # before quantize


def test_ctc_blank_beyond_the_class_count_is_refused_after_export(tmp_path):
    root = ctc_project(tmp_path / "ctc", task='kind = "ctc"\nblank = 99\n')
    msg, started = _passes_started(root, tmp_path)
    assert "[task] blank = 99, but output 0" in msg and "classes (0..10)" in msg, msg
    assert started == ["export"]

