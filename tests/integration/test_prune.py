"""prune (issue 30): L1-norm filter pruning with a distillation fine-tune, on the real digits
example with real PaddleSlim, Paddle, paddle2onnx, onnxruntime and Paddle Lite."""
from __future__ import annotations

import json

import onnx
import pytest
from onnx import numpy_helper

from edgeforge import api
from edgeforge.contracts import check_qdq
from edgeforge.targets import load_target
from helpers import copy_project, run_cli, tiny_project


def _with_prune(proj, **settings):
    text = (proj / "edgeforge.toml").read_text()
    lines = "".join(f"{k} = {v}\n" for k, v in settings.items())
    (proj / "edgeforge.toml").write_text(text + "\n[prune]\n" + lines)
    return proj


@pytest.fixture(scope="module")
def prune_project(digits_project, tmp_path_factory):
    return _with_prune(copy_project(digits_project, tmp_path_factory.mktemp("prune") / "digits"), steps=150)


def _conv_filters(model) -> list[int]:
    g = onnx.load(str(model)).graph
    init = {i.name: i for i in g.initializer}
    out = []
    for n in g.node:
        if n.op_type == "Conv":
            w = n.input[1]
            # an INT8 model's conv reads its weight through a DequantizeLinear
            dq = [d for d in g.node if d.op_type == "DequantizeLinear" and d.output[0] == w]
            name = dq[0].input[0] if dq else w
            out.append(int(numpy_helper.to_array(init[name]).shape[0]))
    return out


def test_prune_removes_the_flops_asked_for_and_holds_the_budget(prune_project, digits_project, tmp_path):
    out = tmp_path / "b"
    r = run_cli("build", str(prune_project), "--target", "linux-x86", "--prune", "0.3", "--out", str(out))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "pruned: FLOPs" in r.stdout and "pruned: accuracy" in r.stdout
    assert all(len(line) <= 80 for line in r.stdout.splitlines() if line.startswith("pruned"))
    m = json.loads((out / "manifest.json").read_text())
    p = m["prune"]
    # the FLOPs counted again here, independently: the pruned convs' filters in the artifact
    plain = api.build(digits_project, "linux-x86", out=tmp_path / "plain").out_dir / "model.onnx"
    before, after = _conv_filters(plain), _conv_filters(out / "model.onnx")
    assert len(before) == len(after) == p["convolutions"] == 3
    assert all(a < b for a, b in zip(after, before)), (before, after)
    assert p["flops_removed"] >= 0.3 and p["flops_after"] < p["flops_before"]
    assert 1 - p["flops_after"] / p["flops_before"] == pytest.approx(p["flops_removed"], abs=1e-4)
    assert p["params_after"] < p["params_before"] and p["size_after"] < p["size_before"]
    assert p["met"] and p["measured"]["accuracy_drop"] <= 1.0
    assert p["accuracy_before"] - p["accuracy_after"] == pytest.approx(p["measured"]["accuracy_drop"] / 100, abs=1e-4)
    assert p["steps"] == 150 and p["loss_curve"][-1] < p["loss_curve"][0]
    assert p["host"]["before_p50_ms"] > 0 and p["host"]["after_p50_ms"] > 0
    assert [s["pass"] for s in m["steps"]][:3] == ["export", "prune", "legalize"]
    assert m["verify"]["status"] == "passed"


@pytest.mark.needs_lite
@pytest.mark.slow   # second of a kind: test_prune_removes_the_flops_asked_for_and_holds_the_budget stays default
def test_pruned_builds_obey_the_lite_and_tensorrt_targets(prune_project, tmp_path):
    orin = api.build(prune_project, "jetson-orin", out=tmp_path / "orin", prune=0.3)
    c = orin.manifest["verify"]["contract"]
    assert (c["status"], c["violations"]) == ("passed", 0)
    rules = load_target("jetson-orin").backend.onnx.rules["TensorrtExecutionProvider"]
    assert check_qdq(orin.out_dir / "model.onnx", rules) == []
    rpi = api.build(prune_project, "rpi4", out=tmp_path / "rpi4", prune=0.3)
    assert rpi.manifest["prune"]["flops_removed"] >= 0.3
    assert rpi.manifest["artifact"]["path"].endswith(".nb")


@pytest.mark.slow   # second of a kind (see above)
def test_a_pruned_model_that_misses_the_budget_fails_the_build(digits_project, tmp_path):
    # one fine-tune step after removing 70 % of the FLOPs: far outside a 1-point budget
    proj = _with_prune(copy_project(digits_project, tmp_path / "digits"), steps=1)
    out = tmp_path / "b"
    r = run_cli("build", str(proj), "--target", "linux-x86", "--prune", "0.7", "--out", str(out))
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    err = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(err) == 1 and "misses the accuracy budget" in err[0], r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


@pytest.mark.parametrize("value", ["0", "1", "1.5", "nan", "-0.2"])
def test_a_bad_prune_share_is_one_usage_line(digits_project, tmp_path, value):
    r = run_cli("build", str(digits_project), "--target", "linux-x86", "--prune", value,
                "--out", str(tmp_path / "b"))
    assert r.returncode == 2 and "--prune" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_prune_with_qat_is_refused(digits_project, tmp_path):
    r = run_cli("build", str(digits_project), "--target", "linux-x86", "--prune", "0.3", "--qat",
                "--out", str(tmp_path / "b"))
    assert r.returncode == 2 and "--prune and --qat" in r.stderr, r.stderr


MOSTLY_LINEAR = """
import paddle
import paddle.nn as nn


class Net(nn.Layer):
    # the FLOPs are in Linear layers on the raw input, which no conv filter feeds
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(1, 4, 3, padding=1)
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(64, 2048), nn.ReLU(), nn.Linear(2048, 10))

    def forward(self, x):
        return self.fc(x) + paddle.mean(self.conv(x), axis=[1, 2, 3]).unsqueeze(-1)


def build():
    return Net()
"""


def test_a_share_no_ratio_can_reach_is_a_config_error(tmp_path):
    proj = tiny_project(tmp_path / "lin", "lin", MOSTLY_LINEAR, [-1, 1, 8, 8])
    r = run_cli("build", str(proj), "--target", "linux-x86", "--prune", "0.5", "--out", str(tmp_path / "b"))
    assert r.returncode == 2, r.stdout[-1000:] + r.stderr
    err = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(err) == 1 and "removes only" in err[0] and "ask for at most --prune" in r.stderr, r.stderr
    assert not (tmp_path / "b").exists()
