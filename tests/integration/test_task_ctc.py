"""[task] kind = "ctc": a conv-only CTC recogniser of real digit strings, trained for a few
seconds, built for linux-x86 (INT8 onnx): verify.task reports sequence accuracy for float and
artifact, and the INT8 budget is judged in the same metric."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from task_projects import ctc_project

from edgeforge import api
from edgeforge.errors import ConfigError


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return ctc_project(tmp_path_factory.mktemp("ctc") / "proj")


def test_verify_reports_sequence_accuracy(project, tmp_path):
    m = api.build(project, "linux-x86", out=tmp_path / "int8").manifest
    t = m["verify"]["task"]
    assert (t["kind"], t["metric"]) == ("ctc", "sequence_accuracy")
    assert 0.2 < t["float"] <= 1.0 and t["artifact"] is not None
    assert t["drop"] == pytest.approx((t["float"] - t["artifact"]) * 100, abs=1e-4)
    assert 0 <= t["figures"]["artifact"]["cer"] < 0.5
    # the INT8 budget measured the same metric
    ab = m["accuracy_budget"]
    assert ab["criterion"] == "task:sequence_accuracy", ab
    assert ab["final"]["accuracy_drop"] == pytest.approx(t["drop"], abs=1e-3)
    assert m["verify"]["status"] == ("passed" if t["drop"] <= 5 else "failed")
    assert m["verify"]["accuracy"] is None               # no classifier's top-1 on [N, T, C]


def test_labels_of_the_wrong_shape_are_a_config_error(project, tmp_path):
    with np.load(project / "data" / "eval.npz") as z:
        x = z["x"]
    bad = tmp_path / "bad"
    shutil.copytree(project, bad)
    np.savez(bad / "data" / "eval.npz", x=x, labels=np.zeros(len(x), dtype=np.int64))
    with pytest.raises(ConfigError, match=r'kind = "ctc" reads labels \[N, L\] padded with -1, not \[96\]'):
        api.build(bad, "linux-x86", precision="fp32", out=tmp_path / "out")


def test_without_labels_the_float_decoding_is_the_truth(project, tmp_path):
    with np.load(project / "data" / "eval.npz") as z:
        x = z["x"]
    free = tmp_path / "free"
    shutil.copytree(project, free)
    np.savez(free / "data" / "eval.npz", x=x)
    t = api.build(free, "linux-x86", out=tmp_path / "out").manifest["verify"]["task"]
    assert (t["metric"], t["float"], t["labelled"]) == ("sequence_accuracy_vs_float", 1.0, False)
    assert t["artifact"] is not None and t["drop"] == pytest.approx((1 - t["artifact"]) * 100, abs=1e-4)
