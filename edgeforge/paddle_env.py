"""Importing paddle the way edgeforge needs it: legacy (non-PIR) programs, quiet logs."""
from __future__ import annotations

import contextlib
import os
import warnings

os.environ["FLAGS_enable_pir_api"] = "0"          # legacy ProgramDesc, readable by Lite and PTQ
os.environ.setdefault("GLOG_minloglevel", "2")
os.environ.setdefault("GLOG_v", "0")


def import_paddle():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import paddle
    paddle.set_device("cpu")
    return paddle


@contextlib.contextmanager
def static_mode():
    paddle = import_paddle()
    was_dynamic = paddle.in_dynamic_mode()
    paddle.enable_static()
    try:
        yield paddle
    finally:
        if was_dynamic:
            paddle.disable_static()


@contextlib.contextmanager
def legacy_static():
    """Static graph mode with the legacy IR for the block, restoring what was there (Paddle's
    OldIrGuard enters static mode from dygraph and switches PIR off if it was on). Yields paddle."""
    paddle = import_paddle()
    from paddle.pir_utils import OldIrGuard

    with OldIrGuard():
        yield paddle


@contextlib.contextmanager
def private_scope(paddle):
    """A fresh ``paddle.static.Scope`` as the current scope and an Executor for it; both are
    released on exit, the executor first. Yields ``(scope, exe)``.

    Paddle keeps every Scope created from Python in a global pool until it is removed from it, so
    each load_inference_model into a new scope kept the model's parameters for the life of the
    process (measured: +1x the parameters per load, ~13 GB after vgg16's budget rounds). The
    executor's cached interpreters point into the scope: they are destroyed before the scope is
    (the other order is a use-after-free that corrupted the heap of a zoo build process). Use
    only this ``exe`` inside the block."""
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    try:
        with paddle.static.scope_guard(scope):
            yield scope, exe
    finally:
        exe.close()
        exe._executor_cache.clear()       # the interpreters that hold pointers into the scope
        release = getattr(scope, "_remove_from_pool", None)
        if release is not None:
            release()


def load_program(model_dir, exe):
    """Load a legacy inference program saved as model_dir/model.pdmodel + .pdiparams, with the
    executor of a ``private_scope``."""
    paddle = import_paddle()
    prog, feeds, fetches = paddle.static.load_inference_model(str(model_dir / "model"), exe)
    return prog, feeds, fetches


def paddle_inference(model_dir, feeds: dict, batch: int = 64) -> list:
    """Run the static program with the Paddle executor on ``feeds``; outputs in fetch order."""
    import numpy as np

    with static_mode() as paddle, private_scope(paddle) as (_, exe):
        prog, feed_names, fetches = load_program(model_dir, exe)
        n = len(next(iter(feeds.values())))
        chunks: list[list] = []
        for i in range(0, n, batch):
            out = exe.run(prog, feed={k: feeds[k][i:i + batch] for k in feed_names}, fetch_list=fetches)
            chunks.append([np.asarray(o) for o in out])
    return [np.concatenate([c[j] for c in chunks]) for j in range(len(chunks[0]))]
