"""issue 19, results that look fine but are wrong: NaN/Inf in the evaluation or calibration data,
NaN in the weights, labels outside the model's output range. Each: exit 2, one line naming the
file, the array, what is wrong and how many values; nothing built. Through the real CLI."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from helpers import copy_project, run_cli
from test_errors import assert_clean_failure


@pytest.fixture
def project(digits_project, tmp_path):
    return copy_project(digits_project, tmp_path / "proj")


def _poison(path, name, values, at):
    with np.load(path) as npz:
        arrays = {k: npz[k].copy() for k in npz.files}
    arrays[name].reshape(-1)[at] = values
    np.savez(path, **arrays)


def _build(project, out, *extra):
    return run_cli("build", str(project), "--target", "jetson-orin", "--out", str(out), *extra)


def test_nan_and_inf_in_the_evaluation_data(project, tmp_path):
    _poison(project / "data" / "eval.npz", "x", [np.nan, np.nan, np.inf], [0, 5, 9])
    out = tmp_path / "out"
    assert_clean_failure(_build(project, out), 2, "evaluation data data/eval.npz", "array 'x'",
                         "2 NaN and 1 Inf values", out=out)


def test_inf_in_the_calibration_data(project, tmp_path):
    _poison(project / "data" / "calib.npz", "x", [-np.inf], [3])
    out = tmp_path / "out"
    assert_clean_failure(_build(project, out, "--precision", "int8"), 2,
                         "calibration data data/calib.npz", "array 'x'", "1 Inf value (of ", out=out)


def test_nan_in_the_weights(project, tmp_path):
    from edgeforge.weights import load_state_dict

    weights = load_state_dict(project / "digits.pdparams")
    name = sorted(weights)[0]
    weights[name].reshape(-1)[:4] = np.nan
    with open(project / "digits.pdparams", "wb") as fh:
        pickle.dump(weights, fh, protocol=4)
    out = tmp_path / "out"
    assert_clean_failure(_build(project, out, "--no-cache"), 2, "weights digits.pdparams",
                         f"tensor '{name}'", "4 NaN values", out=out)


def test_labels_outside_the_models_classes(project, tmp_path):
    """labels 100..103 on the 10-class digits model; the class count comes from export's probe
    of the model (its output shape), so the check runs right after export, before any other
    pass (legalize, quantize, convert, verify)."""
    path = project / "data" / "eval.npz"
    with np.load(path) as npz:
        arrays = {k: npz[k].copy() for k in npz.files}
    n = len(arrays["labels"])
    arrays["labels"] = (100 + np.arange(n) % 4).astype(arrays["labels"].dtype)
    np.savez(path, **arrays)
    out = tmp_path / "out"
    res = _build(project, out, "--precision", "int8")
    assert_clean_failure(res, 2, "evaluation data data/eval.npz", "array 'labels'",
                         f"has {n} values outside the model's 10 classes", "found 100..103", out=out)
    assert "quantize" not in res.stderr + res.stdout.split("error:")[0]
