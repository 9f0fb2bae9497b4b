"""Importing paddle the way edgeforge needs it: legacy (non-PIR) programs by default, quiet logs.

A program directory holds ``model.pdmodel`` (legacy ProgramDesc) or ``model.json`` (a Paddle 3
PIR program), each with ``model.pdiparams``. The process stays in legacy-IR mode; a PIR program
is loaded and run under Paddle's ``IrGuard`` (:func:`program_guard`) and exported under
``DygraphPirGuard`` (passes/export.py).
"""
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


PIR_FILE = "model.json"          # a PIR program (paddle.jit.save with PIR on)
LEGACY_FILE = "model.pdmodel"    # a legacy ProgramDesc


def is_pir(model_dir) -> bool:
    """Whether the program directory holds a PIR program (``model.json``, no ``model.pdmodel``)."""
    from pathlib import Path

    return (Path(model_dir) / PIR_FILE).is_file() and not (Path(model_dir) / LEGACY_FILE).is_file()


def program_guard(model_dir):
    """The IR context a program directory's program loads and runs in: ``IrGuard`` for PIR."""
    if not is_pir(model_dir):
        return contextlib.nullcontext()
    import_paddle()
    from paddle.pir_utils import IrGuard

    return IrGuard()


def load_program(model_dir, exe):
    """Load the inference program saved as model_dir/model.pdmodel (or model.json, inside
    :func:`program_guard`) + .pdiparams, with the executor of a ``private_scope``."""
    paddle = import_paddle()
    prog, feeds, fetches = paddle.static.load_inference_model(str(model_dir / "model"), exe)
    return prog, feeds, fetches


def paddle_inference(model_dir, feeds: dict, batch: int = 64) -> list:
    """Run the static program with the Paddle executor on ``feeds``; outputs in fetch order."""
    import numpy as np

    with program_guard(model_dir), static_mode() as paddle, private_scope(paddle) as (_, exe):
        prog, feed_names, fetches = load_program(model_dir, exe)
        n = len(next(iter(feeds.values())))
        chunks: list[list] = []
        for i in range(0, n, batch):
            out = exe.run(prog, feed={k: feeds[k][i:i + batch] for k in feed_names}, fetch_list=fetches)
            chunks.append([np.asarray(o) for o in out])
    return [np.concatenate([c[j] for c in chunks]) for j in range(len(chunks[0]))]
