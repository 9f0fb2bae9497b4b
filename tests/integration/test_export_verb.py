"""`edgeforge export` (issue 45): the legacy program edgeforge's compatibility layer writes, as
files a Lite-only target builds from, for a model whose plain Paddle 3.3 legacy export fails."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import run_cli

# PP-LCNet's SE block in a few lines: paddle.multiply of two tensors, a C++-routed API in Paddle
# 3.2+ whose legacy export fails ("multiply(): argument (position 1) must be Value, but got Variable")
SE_NET = '''
import paddle
import paddle.nn as nn
import paddle.nn.functional as F


class SENet(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(1, 8, 3, padding=1)
        self.fc = nn.Conv2D(8, 8, 1)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        y = F.relu(self.conv(x))
        gate = F.hardsigmoid(self.fc(F.adaptive_avg_pool2d(y, 1)))
        y = paddle.multiply(y, gate)
        return self.head(paddle.flatten(F.adaptive_avg_pool2d(y, 1), 1))
'''
PLAIN_EXPORT = """
import sys
sys.path.insert(0, sys.argv[1])
import paddle
from senet import SENet
paddle.jit.save(SENet(), sys.argv[2], input_spec=[paddle.static.InputSpec([None, 1, 16, 16], "float32", "x")])
"""


@pytest.fixture
def senet(tmp_path) -> Path:
    root = tmp_path / "code"
    root.mkdir()
    (root / "senet.py").write_text(textwrap.dedent(SE_NET))
    return root


@pytest.mark.needs_lite
def test_export_writes_the_legacy_program_plain_paddle_cannot(senet, tmp_path):
    env = dict(os.environ, FLAGS_enable_pir_api="0")
    plain = subprocess.run([sys.executable, "-c", PLAIN_EXPORT, str(senet), str(tmp_path / "plain" / "m")], env=env,
                           capture_output=True, text=True, timeout=300)
    assert plain.returncode != 0 and "must be Value, but got Variable" in plain.stderr, plain.stderr[-500:]

    out = tmp_path / "legacy"
    res = run_cli("export", str(senet), "--factory", "senet:SENet", "--input", "x:-1,1,16,16", "--legacy",
                  "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["inference.pdiparams", "inference.pdmodel"]
    assert "input x: [-1, 1, 16, 16] float32" in res.stdout and "multiply" in res.stdout, res.stdout
    assert res.stderr == "" and f"--from-inference {out / 'inference'}" in res.stdout

    # the printed next step, then a Lite-only target builds from it
    proj = tmp_path / "proj"
    data = tmp_path / "data"
    data.mkdir()
    import numpy as np

    np.save(data / "x.npy", np.random.default_rng(0).normal(size=(24, 1, 16, 16)).astype("float32"))
    assert run_cli("init", str(proj), "--from-inference", str(out / "inference"), "--data", str(data)).returncode == 0
    built = run_cli("build", "--target", "android-armv7", "--precision", "fp32", "--out", str(tmp_path / "b"), "-q",
                    cwd=proj)
    assert built.returncode == 0, built.stderr
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert (m["backend"], m["artifact"]["path"]) == ("lite", "model.nb") and m["artifact"]["size_bytes"] > 0


def test_export_never_replaces_files(senet, tmp_path):
    out = tmp_path / "legacy"
    out.mkdir()
    (out / "inference.pdmodel").write_text("mine")
    res = run_cli("export", str(senet), "--factory", "senet:SENet", "--input", "x:-1,1,16,16", "--out", str(out))
    assert res.returncode == 2 and res.stderr.startswith("error: --out ") and "holds files" in res.stderr
    assert (out / "inference.pdmodel").read_text() == "mine" and len(list(out.iterdir())) == 1
    bad = run_cli("export", str(senet), "--factory", "senet.SENet", "--out", str(tmp_path / "n"))
    assert bad.returncode == 2 and "write it as module:Class" in bad.stderr and not (tmp_path / "n").exists()
    shutil.rmtree(out)


# PaddleDetection's ops.multiclass_nms in a few lines: eager calls the C++ binding, static mode
# appends the legacy op through LayerHelper, which a PIR trace refuses (PicoDet's PIR export:
# "The type of '%BBoxes' in operator multiclass_nms3 should be one of [str, bytes, Variable]")
NMS_NET = '''
import paddle
import paddle.nn as nn
from paddle import _C_ops, in_dynamic_mode
from paddle.base.layer_helper import LayerHelper

ATTRS = dict(background_label=-1, score_threshold=0.05, nms_top_k=32, nms_threshold=0.5, keep_top_k=8,
             nms_eta=1.0, normalized=False)


def multiclass_nms(bboxes, scores):
    if in_dynamic_mode():
        out, _, num = _C_ops.multiclass_nms3(bboxes, scores, None, 0.05, 32, 8, 0.5, False, 1.0, -1)
        return out, num
    helper = LayerHelper("multiclass_nms3")
    out = helper.create_variable_for_type_inference(dtype=bboxes.dtype)
    index = helper.create_variable_for_type_inference(dtype="int32")
    num = helper.create_variable_for_type_inference(dtype="int32")
    helper.append_op(type="multiclass_nms3", inputs={"BBoxes": bboxes, "Scores": scores},
                     outputs={"Out": out, "Index": index, "NmsRoisNum": num}, attrs=ATTRS)
    return out, num


class Det(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(1, 7, 1)

    def forward(self, x):
        y = paddle.flatten(self.conv(x), 2)                       # [N, 7, 16]
        boxes = paddle.transpose(y[:, :4], [0, 2, 1]) * 4.0 + paddle.to_tensor([0.0, 0.0, 8.0, 8.0])
        return multiclass_nms(boxes, nn.functional.sigmoid(y[:, 4:]))
'''


def test_a_failed_pir_export_names_the_legacy_command(tmp_path):
    import shlex

    root = tmp_path / "code"
    root.mkdir()
    (root / "det.py").write_text(textwrap.dedent(NMS_NET))
    out = tmp_path / "exported"
    res = run_cli("export", str(root), "--factory", "det:Det", "--input", "x:-1,1,4,4", "--pir", "--out", str(out))
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "multiclass_nms3" in errors[0] and not out.exists(), errors[0]
    command = errors[0].split("the legacy program exports: ", 1)[1].split("; then build from it", 1)[0]
    assert command.startswith("edgeforge export ") and " --legacy --out " in command, command
    assert f'; then build from it: [model] inference = "{out / "inference"}"' in errors[0]
    # the command, run as printed, writes the legacy program (the legacy-API patch is not needed:
    # LayerHelper appends the legacy op itself)
    again = run_cli(*shlex.split(command)[1:])
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in out.iterdir()) == ["inference.pdiparams", "inference.pdmodel"]
