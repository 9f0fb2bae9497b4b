"""Legalize: rewrite a legacy Paddle program so the frozen converters take it.

Paddle 3.3 exports (``paddle.jit.save`` with ``FLAGS_enable_pir_api=0``) drop attributes and
outputs that are no longer in Paddle's own op definitions ("clip extra"). Paddle Lite 2.13rc0
still reads some of them unconditionally and then aborts or segfaults the whole process.
Every rewrite here restores an equivalent op form; none changes the numbers the model computes
(``tests/integration/test_legalize.py`` checks each one against Paddle Inference).
``docs/legalize-findings.md`` records the failures each rewrite answers, with the exact messages.

Model directory format: ``model.pdmodel`` + ``model.pdiparams`` (legacy ProgramDesc).
Paddle is imported lazily, in legacy-IR mode, so importing this module costs nothing.
"""
from __future__ import annotations

import functools
import multiprocessing
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from edgeforge.errors import ConfigError, PassError

PASS_NAME = "legalize"
MODEL_FILE = "model.pdmodel"
PARAMS_FILE = "model.pdiparams"
BACKENDS = frozenset({"lite", "onnx"})

# Attributes set by Paddle on every op it builds; never part of what a converter reads.
_NOISE_ATTRS = ("op_callstack", "op_namescope", "with_quant_attr")


# --------------------------------------------------------------------------------------------
# paddle access


def _paddle():
    """Import paddle in legacy-IR mode (the env var only matters before the first import)."""
    os.environ.setdefault("FLAGS_enable_pir_api", "0")
    import paddle  # noqa: PLC0415

    return paddle


class _StaticLegacy:
    """Static graph mode, legacy IR, for the duration of the block; restores what was there."""

    def __enter__(self):
        paddle = _paddle()
        from paddle.pir_utils import OldIrGuard  # noqa: PLC0415

        self._guard = OldIrGuard()
        self._guard.__enter__()
        self._was_dynamic = paddle.in_dynamic_mode()
        if self._was_dynamic:
            paddle.enable_static()
        return paddle

    def __exit__(self, *exc):
        if self._was_dynamic:
            _paddle().disable_static()
        return self._guard.__exit__(*exc)


# --------------------------------------------------------------------------------------------
# op helpers (all work on paddle.base.framework.Operator / Block)


def _has_attr(op, name: str) -> bool:
    return name in op.desc.attr_names()  # desc.has_attr() also says yes for clipped "extra" attrs


def _set_float_attr(op, name: str, value: float) -> None:
    op.desc._set_float32_attr(name, float(value))  # FLOAT: what Lite's GetAttr<float> wants


def _has_output(op, slot: str) -> bool:
    return slot in op.desc.output_names() and len(op.desc.output(slot)) > 0


def _unique_var_name(block, base: str) -> str:
    name, k = base, 0
    while block.has_var(name) or block.program.global_block().has_var(name):
        k += 1
        name = f"{base}_{k}"
    return name


def _var_shape(block, name: str) -> list[int] | None:
    try:
        return list(block._var_recursive(name).shape)
    except ValueError:
        return None


def _add_xshape(block, op) -> None:
    """Give ``op`` the XShape output older Paddle wrote: shape (0, *X.shape), never read."""
    x = op.desc.input("X")[0]
    out = op.desc.output("Out")[0]
    xvar = block._var_recursive(x)
    name = _unique_var_name(block, f"{out}.xshape")
    block.create_var(name=name, shape=[0, *xvar.shape], dtype=xvar.dtype, persistable=False,
                     stop_gradient=True)
    op.desc.set_output("XShape", [name])


def _strip_extras(op) -> None:
    """Drop the attributes Paddle adds to a fresh op that ``jit.save`` would have clipped."""
    from paddle.base import core  # noqa: PLC0415

    for name in list(core.get_op_extra_attrs(op.type).keys()) + list(_NOISE_ATTRS):
        if op.desc.has_attr(name):
            op.desc.remove_attr(name)


# --------------------------------------------------------------------------------------------
# the rewrites


@dataclass(frozen=True)
class Rewrite:
    """One registered rewrite. ``match(op)`` says an op needs it; ``fix(block, index, op)``
    rewrites that op in place and returns how many ops it changed (0 when it could not)."""

    name: str
    description: str
    backends: frozenset[str]
    valid_targets: frozenset[str] | None
    match: Callable[[Any], bool] = field(repr=False, compare=False)
    fix: Callable[[Any, int, Any], int] = field(repr=False, compare=False)

    def for_target(self, backend: str, valid_targets: Iterable[str]) -> bool:
        if backend not in self.backends:
            return False
        return self.valid_targets is None or bool(self.valid_targets & set(valid_targets))

    def matching_ops(self, program) -> list[str]:
        return [op.type for block in program.blocks for op in block.ops if self.match(op)]

    def applies(self, program) -> bool:
        return any(self.match(op) for block in program.blocks for op in block.ops)

    def apply(self, program, scope) -> int:  # noqa: ARG002 - scope: for rewrites that touch weights
        changed = 0
        for block in program.blocks:
            i = 0
            while i < len(block.ops):
                op = block.ops[i]
                if self.match(op):
                    changed += self.fix(block, i, op)
                i += 1
        if changed:
            program._sync_with_cpp()
        return changed


def _missing_attrs_rewrite(name: str, op_type: str, defaults: dict[str, float], why: str) -> Rewrite:
    """Add float attributes that Paddle 3.x no longer writes but Lite reads unconditionally.
    The values are the ones the Paddle 3.x kernel hard-codes, so the numbers do not change."""

    def match(op) -> bool:
        return op.type == op_type and any(not _has_attr(op, a) for a in defaults)

    def fix(block, index, op) -> int:  # noqa: ARG001
        for attr, value in defaults.items():
            if not _has_attr(op, attr):
                _set_float_attr(op, attr, value)
        return 1

    attrs = ", ".join(f"{a}={v}" for a, v in defaults.items())
    return Rewrite(
        name=name,
        description=f"{op_type}: add {attrs} (missing from Paddle 3.x exports; {why})",
        backends=frozenset({"lite"}),
        valid_targets=None,
        match=match,
        fix=fix,
    )


def _flatten_no_xshape(op) -> bool:
    return op.type == "flatten_contiguous_range" and not _has_output(op, "XShape")


def _fix_flatten_xshape(block, index, op) -> int:  # noqa: ARG001
    _add_xshape(block, op)
    return 1


def _flatten_reshape_shape(in_shape: list[int], start: int, stop: int) -> list[int] | None:
    """The ``reshape2`` shape attribute equal to flatten(start, stop) on ``in_shape``.

    0 copies the input dimension at the same index (only valid before the flattened range,
    where indices agree); -1 absorbs the flattened range when its size is not static; the
    dimensions after the range must be static. None when no single shape attribute works.
    """
    rank = len(in_shape)
    if rank == 0:
        return [1]
    start = start + rank if start < 0 else start
    stop = stop + rank if stop < 0 else stop
    if not 0 <= start <= stop < rank:
        return None
    head = [0] * start
    tail = in_shape[stop + 1:]
    if any(d is None or d <= 0 for d in tail):
        return None
    middle = in_shape[start:stop + 1]
    size = 1
    for d in middle:
        size = -1 if d is None or d < 0 or size < 0 else size * d
    # head is all 0 and tail static, so a single -1 is unambiguous; a static size (never 0,
    # which reshape2 reads as "copy") keeps the shape visible to the converter's fusions
    return [*head, size if size > 0 else -1, *tail]


def _flatten_reshapable(op) -> bool:
    if op.type != "flatten_contiguous_range":
        return False
    shape = _var_shape(op.block, op.desc.input("X")[0])
    return shape is not None and _flatten_reshape_shape(
        shape, op.attr("start_axis"), op.attr("stop_axis")) is not None


def _fix_flatten_to_reshape2(block, index, op) -> int:
    x = op.desc.input("X")[0]
    out = op.desc.output("Out")[0]
    shape = _flatten_reshape_shape(_var_shape(block, x), op.attr("start_axis"), op.attr("stop_axis"))
    if shape is None:
        return 0
    xvar = block._var_recursive(x)
    xshape = op.desc.output("XShape")[0] if _has_output(op, "XShape") else None
    if xshape is None:
        xshape = _unique_var_name(block, f"{out}.xshape")
        block.create_var(name=xshape, shape=[0, *xvar.shape], dtype=xvar.dtype, persistable=False,
                         stop_gradient=True)
    block._remove_op(index)
    new = block._insert_op(index, type="reshape2", inputs={"X": [x]},
                           outputs={"Out": [out], "XShape": [xshape]}, attrs={"shape": shape})
    _strip_extras(new)
    return 1


REWRITES: tuple[Rewrite, ...] = (
    _missing_attrs_rewrite(
        "relu6-threshold", "relu6", {"threshold": 6.0},
        'Lite aborts "No attributes called threshold found for relu6"'),
    _missing_attrs_rewrite(
        "swish-beta", "swish", {"beta": 1.0},
        'Lite aborts "No attributes called beta found for swish"'),
    Rewrite(
        name="flatten-to-reshape2",
        description="flatten_contiguous_range -> reshape2 with the equivalent shape attribute "
                    "(0 for leading dims, -1 or the static size for the flattened range). Paddle "
                    "3.x writes flatten without its XShape output and Lite's "
                    "FlattenContiguousRangeOp::InferType dereferences it: SIGSEGV.",
        backends=frozenset({"lite"}),
        valid_targets=None,
        match=_flatten_reshapable,
        fix=_fix_flatten_to_reshape2,
    ),
    Rewrite(
        name="flatten-xshape",
        description="flatten_contiguous_range that cannot become reshape2 (dynamic trailing dims): "
                    "restore its XShape output (shape (0, *X.shape), never read at inference).",
        backends=frozenset({"lite"}),
        valid_targets=None,
        match=_flatten_no_xshape,
        fix=_fix_flatten_xshape,
    ),
)
_BY_NAME = {r.name: r for r in REWRITES}


def _check_backend(backend: str, valid_targets: Iterable[str]) -> list[str]:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}", hint=f"use one of {sorted(BACKENDS)}")
    targets = [str(t).strip().lower() for t in (valid_targets or [])]
    if backend == "lite" and not targets:
        raise ConfigError("backend lite needs valid_targets", hint='e.g. ["arm"] or ["x86"]')
    return targets


def rewrites_for(backend: str, valid_targets: list[str]) -> list[Rewrite]:
    """The rewrites that apply to ``backend`` with these Lite ``valid_targets``, in order."""
    targets = _check_backend(backend, valid_targets)
    return [r for r in REWRITES if r.for_target(backend, targets)]


# --------------------------------------------------------------------------------------------
# load / save


def _model_files(model_dir: Path) -> tuple[Path, Path]:
    model_dir = Path(model_dir)
    model, params = model_dir / MODEL_FILE, model_dir / PARAMS_FILE
    if not model.is_file():
        raise PassError(PASS_NAME, f"no {MODEL_FILE} in {model_dir}",
                        hint="legalize takes a legacy export: paddle.jit.save with FLAGS_enable_pir_api=0")
    return model, params


def _parse_program(model_file: Path):
    """The ProgramDesc only (no weights): enough to list ops and to plan rewrites."""
    data = Path(model_file).read_bytes()
    with _StaticLegacy():
        from paddle.base.framework import Program  # noqa: PLC0415

        return Program.parse_from_string(data)


def _feeds_fetches(program) -> tuple[list[str], list[str]]:
    feeds, fetches = {}, {}
    for op in program.global_block().ops:
        if op.type == "feed":
            feeds[op.attr("col")] = op.desc.output("Out")[0]
        elif op.type == "fetch":
            fetches[op.attr("col")] = op.desc.input("X")[0]
    return [feeds[k] for k in sorted(feeds)], [fetches[k] for k in sorted(fetches)]


def legalize_model(src_dir: Path, dst_dir: Path, backend: str, valid_targets: list[str]) -> list[dict]:
    """Apply ``rewrites_for(backend, valid_targets)`` to the model in ``src_dir``; write the
    result to ``dst_dir`` (model.pdmodel + model.pdiparams, same feed and fetch names).

    Returns one ``{"rewrite": name, "ops": n}`` per rewrite considered, in order. When nothing
    changes, the input files are copied byte for byte.
    """
    src_dir, dst_dir = Path(src_dir), Path(dst_dir)
    rewrites = rewrites_for(backend, valid_targets)
    model_file, params_file = _model_files(src_dir)
    if src_dir.resolve() == dst_dir.resolve():
        raise PassError(PASS_NAME, "source and destination are the same directory")

    # plan on the ProgramDesc alone: cheap, and lets an untouched model be copied as is
    program = _parse_program(model_file)
    if not any(r.applies(program) for r in rewrites):
        dst_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(model_file, dst_dir / MODEL_FILE)
        if params_file.exists():
            shutil.copyfile(params_file, dst_dir / PARAMS_FILE)
        return [{"rewrite": r.name, "ops": 0} for r in rewrites]

    with _StaticLegacy() as paddle:
        scope = paddle.static.Scope()
        with paddle.static.scope_guard(scope):
            exe = paddle.static.Executor(paddle.CPUPlace())
            try:
                program, feed_names, fetch_vars = paddle.static.load_inference_model(
                    str(src_dir / "model"), exe)
            except Exception as err:  # paddle raises bare RuntimeError/ValueError here
                raise PassError(PASS_NAME, f"cannot load {src_dir}: {err}") from err
            want_feeds, want_fetches = list(feed_names), [v.name for v in fetch_vars]
            report = []
            for rewrite in rewrites:
                report.append({"rewrite": rewrite.name, "ops": rewrite.apply(program, scope)})
            block = program.global_block()
            dst_dir.mkdir(parents=True, exist_ok=True)
            try:
                paddle.static.save_inference_model(
                    str(dst_dir / "model"),
                    [block.var(n) for n in feed_names],
                    [block.var(v.name) for v in fetch_vars],
                    exe,
                    program=program,
                    # clip_extra=True would strip exactly what the rewrites restored
                    clip_extra=False,
                )
            except Exception as err:
                raise PassError(PASS_NAME, f"cannot save the legalized model: {err}") from err

    got_feeds, got_fetches = _feeds_fetches(_parse_program(dst_dir / MODEL_FILE))
    if (got_feeds, got_fetches) != (want_feeds, want_fetches):
        raise PassError(PASS_NAME, f"feeds/fetches changed: {want_feeds}->{got_feeds}, "
                                   f"{want_fetches}->{got_fetches}")
    return report
