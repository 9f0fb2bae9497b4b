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
