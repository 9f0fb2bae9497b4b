"""--precision auto on the host stand-in: every precision linux-x86 allows is built and timed
interleaved; the fastest within the accuracy budget is kept where a plain build puts it, with
decision.json beside it. INT8 wins on a conv-heavy net; it loses when the heavy layers are
kept in float on purpose (INT8 then only adds quantize/dequantize boundaries)."""
from __future__ import annotations

import json

import pytest

from edgeforge.device.workflow.auto import decide_on_host
from edgeforge.options import BuildOptions
from helpers import tiny_project

CONVS = """
import paddle
from paddle import nn


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        paddle.seed(0)
        layers = [nn.Conv2D(16, 64, 3, padding=1), nn.ReLU()]
        for _ in range(3):
            layers += [nn.Conv2D(64, 64, 3, padding=1), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.body(x).mean(axis=[2, 3]))


def build():
    return Net()
"""


@pytest.fixture(scope="module")
def convnet(tmp_path_factory):
    return tiny_project(tmp_path_factory.mktemp("auto") / "convnet", "convnet", CONVS, [-1, 16, 48, 48])


def test_auto_keeps_int8_where_it_is_faster(convnet, tmp_path):
    d = decide_on_host(convnet, "linux-x86", out=tmp_path / "b")
    rec = d.record
    assert rec["where"] == "host" and rec["allowed"] == ["fp32", "fp16", "int8"]
    assert [c["precision"] for c in rec["candidates"]] == ["fp32", "fp16", "int8"]
    int8 = next(c for c in rec["candidates"] if c["precision"] == "int8")
    assert int8["compare"]["verdict"] == "faster", int8
    assert rec["chosen"] == "int8" and "faster than fp32" in rec["reason"]
    assert d.build.manifest["precision"] == "int8" and d.build.out_dir == tmp_path / "b"
    assert json.loads((tmp_path / "b" / "decision.json").read_text()) == rec


@pytest.mark.slow
def test_auto_keeps_fp32_where_int8_is_slow(convnet, tmp_path):
    import onnx

    fp32 = decide_on_host(convnet, "linux-x86", BuildOptions(precision=None), out=tmp_path / "probe")
    onnx_path = tmp_path / "probe" / fp32.build.manifest["artifact"]["path"]
    convs = [n.name for n in onnx.load(str(onnx_path)).graph.node if n.op_type == "Conv"]
    assert len(convs) == 4
    # every heavy layer in float: INT8 is fp32 plus boundaries around the one quantized Gemm
    d = decide_on_host(convnet, "linux-x86", BuildOptions(keep_float=convs), out=tmp_path / "b")
    int8 = next(c for c in d.record["candidates"] if c["precision"] == "int8")
    assert int8["compare"]["verdict"] != "faster", int8
    assert d.record["chosen"] == "fp32" and "no other precision" in d.record["reason"]
    assert d.build.manifest["precision"] == "fp32"
    assert (tmp_path / "b" / "decision.json").is_file()


@pytest.mark.needs_lite
def test_auto_needs_a_device_where_the_host_cannot_time_the_artifact(digits_project, tmp_path):
    """rpi4's Paddle Lite .nb (ARM): the host cannot run it, so build --precision auto builds
    the target's default and says the decision needs a device."""
    d = decide_on_host(digits_project, "rpi4", out=tmp_path / "b")
    rec = d.record
    assert rec["where"] is None and rec["candidates"] == []
    assert rec["chosen"] == "int8" == d.build.manifest["precision"]
    assert "the decision needs a device" in rec["reason"] and "run --precision auto" in rec["reason"]
    assert json.loads((tmp_path / "b" / "decision.json").read_text())["chosen"] == "int8"


def _flat(text: str) -> str:
    return " ".join(text.split())          # the CLI wraps at the terminal's width


def test_jetson_orin_build_gives_no_host_verdict_and_says_the_decision_needs_a_device(digits_project,
                                                                                    tmp_path):
    """issue 23: the host's CPUExecutionProvider is not jetson-orin's TensorRT, so neither the
    build's verdict nor --precision auto decides on the host's timing."""
    from helpers import run_cli

    res = run_cli("build", str(digits_project), "--target", "jetson-orin", "--out", str(tmp_path / "b"))
    assert res.returncode == 0, res.stderr
    out = _flat(res.stdout)
    assert "ship fp32" not in out and "picks fp32" not in out and "host stand-in" not in out, out
    assert ("verdict: the host cannot decide (jetson-orin runs TensorrtExecutionProvider, the host "
            "times CPUExecutionProvider); the decision needs a device: edgeforge bench") in out, out
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert m["int8_vs_fp32"] is None and m["verify"]["status"] == "passed"

    auto = run_cli("build", str(digits_project), "--target", "jetson-orin", "--precision", "auto",
                   "--out", str(tmp_path / "a"))
    assert auto.returncode == 0, auto.stderr
    out = _flat(auto.stdout)
    assert "picks fp32" not in out and "ship fp32" not in out, out
    assert ("precision auto (not measured): int8 — the host cannot decide (jetson-orin runs "
            "TensorrtExecutionProvider") in out, out
    assert "the decision needs a device" in out and "built the target's default" in out, out
    rec = json.loads((tmp_path / "a" / "decision.json").read_text())
    assert rec["where"] is None and rec["candidates"] == [] and rec["chosen"] == "int8"
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["precision"] == "int8"


def test_linux_x86_build_keeps_its_host_verdict(digits_project, tmp_path):
    from helpers import run_cli

    res = run_cli("build", str(digits_project), "--target", "linux-x86", "--out", str(tmp_path / "b"))
    assert res.returncode == 0, res.stderr
    out = _flat(res.stdout)
    assert "verdict (host stand-in): INT8 " in out and "needs a device" not in out, out
    assert json.loads((tmp_path / "b" / "manifest.json").read_text())["int8_vs_fp32"]["threads"] >= 1
