"""edgeforge.paddle_env.private_scope: loading a program into a fresh scope must not keep its
parameters for the life of the process (Paddle pools every Scope created from Python; the
accuracy budget loads a model a dozen times: vgg16 reached ~13 GB)."""
from __future__ import annotations

import ctypes
import gc

import numpy as np

from edgeforge.paddle_env import paddle_inference, static_mode

PARAMS_MB = 64          # one fc layer of 4096 x 4096 float32


def _rss_mb() -> float:
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)      # give freed pages back, so RSS shows retention only
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


def _big_model(tmp_path):
    with static_mode() as paddle:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [None, 4096], "float32")
            y = paddle.static.nn.fc(x, 4096)
        exe = paddle.static.Executor(paddle.CPUPlace())
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe.run(startup)
            paddle.static.save_inference_model(str(tmp_path / "model"), [x], [y], exe, program=main)
        scope._remove_from_pool()
    return tmp_path


def test_loading_a_model_repeatedly_does_not_keep_its_parameters(tmp_path):
    model = _big_model(tmp_path)
    feeds = {"x": np.ones((2, 4096), "float32")}
    paddle_inference(model, feeds)                 # first load: paddle's own one-off allocations
    before = _rss_mb()
    for _ in range(6):
        out = paddle_inference(model, feeds)
    grown = _rss_mb() - before
    assert out[0].shape == (2, 4096)
    # retaining the parameters would grow ~6 x 64 MB; allocator slack stays well under one copy
    assert grown < PARAMS_MB, f"RSS grew {grown:.0f} MB over 6 loads of a {PARAMS_MB} MB model"
