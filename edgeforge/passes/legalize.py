"""Legalize: rewrite a legacy Paddle program so the frozen converters take it.

Paddle 3.3 exports (``paddle.jit.save`` with ``FLAGS_enable_pir_api=0``) drop attributes and
outputs that are no longer in Paddle's own op definitions ("clip extra"). Paddle Lite 2.13rc0
still reads some of them unconditionally and then aborts or segfaults the whole process.
Every rewrite here swaps an op for an equivalent form the converter takes. All but one are
bit-exact under Paddle Inference; ``pow2-to-square`` (``exact=False``) agrees to 1 ulp.
``tests/integration/test_legalize.py`` checks each one against Paddle Inference.
``docs/legalize-findings.md`` records the failures each rewrite answers, with the exact messages.

Model directory format: ``model.pdmodel`` + ``model.pdiparams`` (legacy ProgramDesc).
Paddle is imported lazily, in legacy-IR mode, so importing this module costs nothing.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from edgeforge.errors import ConfigError, PassError
from edgeforge.paddle_env import private_scope

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
    """Static graph mode, legacy IR, for the duration of the block; restores what was there
    (paddle's OldIrGuard enters static mode from dygraph and switches PIR off if it was on)."""

    def __enter__(self):
        paddle = _paddle()
        from paddle.pir_utils import OldIrGuard  # noqa: PLC0415

        self._guard = OldIrGuard()
        self._guard.__enter__()
        return paddle

    def __exit__(self, *exc):
        return self._guard.__exit__(*exc)


# --------------------------------------------------------------------------------------------
# op helpers (all work on paddle.base.framework.Operator / Block)


def _has_attr(op, name: str) -> bool:
    return name in op.desc.attr_names()  # desc.has_attr() also says yes for clipped "extra" attrs


def _set_float_attr(op, name: str, value: float) -> None:
    op.desc._set_float32_attr(name, float(value))  # FLOAT: what Lite's GetAttr<float> wants


def _inputs(op, slot: str) -> list[str]:
    return list(op.desc.input(slot)) if slot in op.desc.input_names() else []


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
        if _has_attr(op, name):
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
    # False: the new op form agrees to float rounding (<= 1 ulp), not bit for bit
    exact: bool = True
    # what the converter or runtime does without the rewrite (exact messages where there are)
    problem: str = ""

    def for_target(self, backend: str, valid_targets: Iterable[str]) -> bool:
        if backend not in self.backends:
            return False
        return self.valid_targets is None or bool(self.valid_targets & set(valid_targets))

    def applies(self, program) -> bool:
        return any(self.match(op) for block in program.blocks for op in block.ops)

    def apply(self, program, scope) -> int:  # noqa: ARG002 - scope: for rewrites that touch weights
        changed = 0
        with _StaticLegacy():  # building an Operator needs static mode
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


def _missing_attrs_rewrite(name: str, op_type: str, defaults: dict[str, float], problem: str) -> Rewrite:
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
        description=f"{op_type}: add {attrs}, the value Paddle 3.x hard-codes (its exports "
                    "clip the attribute as 'extra')",
        backends=frozenset({"lite"}),
        valid_targets=None,
        match=match,
        fix=fix,
        problem=problem,
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


def _instance_norm_no_stats(op) -> bool:
    return op.type == "instance_norm" and not (
        _has_output(op, "SavedMean") and _has_output(op, "SavedVariance"))


def _fix_instance_norm_stats(block, index, op) -> int:  # noqa: ARG001
    """Restore SavedMean/SavedVariance (shape [N*C]); Lite attaches them as required outputs."""
    x = block._var_recursive(op.desc.input("X")[0])
    n, c = (list(x.shape) + [-1, -1])[:2]
    size = n * c if n is not None and c is not None and n > 0 and c > 0 else -1
    y = op.desc.output("Y")[0]
    for slot in ("SavedMean", "SavedVariance"):
        if not _has_output(op, slot):
            name = _unique_var_name(block, f"{y}.{slot.lower()}")
            block.create_var(name=name, shape=[size], dtype=x.dtype, persistable=False,
                             stop_gradient=True)
            op.desc.set_output(slot, [name])
    return 1


def _is_brelu(op) -> bool:
    return op.type == "brelu"


def _fix_brelu_to_clip(block, index, op) -> int:
    """brelu(t_min, t_max) is min(max(x, t_min), t_max): exactly clip(min, max)."""
    x, out = op.desc.input("X")[0], op.desc.output("Out")[0]
    lo, hi = float(op.attr("t_min")), float(op.attr("t_max"))
    block._remove_op(index)
    new = block._insert_op(index, type="clip", inputs={"X": [x]}, outputs={"Out": [out]},
                           attrs={"min": lo, "max": hi})
    _strip_extras(new)
    new.desc._set_float32_attr("min", lo)
    new.desc._set_float32_attr("max", hi)
    return 1


def _is_pow2(op) -> bool:
    return (op.type == "pow" and not _inputs(op, "FactorTensor")
            and float(op.attr("factor")) == 2.0)


def _fix_pow2_to_square(block, index, op) -> int:
    """pow(x, 2) -> square(x): the same product, and Lite's x86 pow kernel returns inf for
    every negative base (it goes through log)."""
    x, out = op.desc.input("X")[0], op.desc.output("Out")[0]
    block._remove_op(index)
    new = block._insert_op(index, type="square", inputs={"X": [x]}, outputs={"Out": [out]})
    _strip_extras(new)
    return 1


# ops for which a [1]-shaped operand broadcasts exactly like a 0-D one, given that the
# other operand has rank >= 1 (the output shape is the other operand's either way)
_BROADCAST_OPS = frozenset({
    "elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
    "elementwise_max", "elementwise_min", "elementwise_pow", "elementwise_mod",
    "elementwise_floordiv", "greater_than", "greater_equal", "less_than", "less_equal",
    "equal", "not_equal", "where",
})


def _scalar_fill_promotable(op) -> bool:
    if op.type != "fill_constant" or list(op.attr("shape")) != []:
        return False
    if any(_inputs(op, slot) for slot in ("ShapeTensor", "ShapeTensorList", "ValueTensor")):
        return False
    block = op.block
    out = op.desc.output("Out")[0]
    users = [o for o in block.ops if out in o.desc.input_arg_names()]
    if not users:
        return False
    for user in users:
        if user.type not in _BROADCAST_OPS:
            return False  # fetch, reshape, concat ... would see the rank change
        others = [n for n in user.desc.input_arg_names() if n != out]
        if not others:
            return False
        for n in others:
            shape = _var_shape(block, n)
            if shape is None or len(shape) < 1:
                return False
    return True


def _fix_scalar_fill(block, index, op) -> int:  # noqa: ARG001
    op.desc._set_int64s_attr("shape", [1])
    block._var_recursive(op.desc.output("Out")[0]).desc.set_shape([1])
    return 1


def _channel_shuffle_plan(op) -> tuple[list[int], list[int], list[int]] | None:
    """(shape1, perm, shape2) for channel_shuffle as reshape2 -> transpose2 -> reshape2."""
    if op.type != "channel_shuffle":
        return None
    shape = _var_shape(op.block, op.desc.input("X")[0])
    groups = int(op.attr("groups"))
    fmt = op.attr("data_format") if "data_format" in op.desc.attr_names() else "NCHW"
    if shape is None or len(shape) != 4 or groups <= 0:
        return None
    if any(d is None or d <= 0 for d in shape[1:]):
        return None  # the 0-copy trick only covers the batch dim
    if fmt == "NCHW":
        _, c, h, w = shape
        if c % groups:
            return None
        return [0, groups, c // groups, h, w], [0, 2, 1, 3, 4], [0, c, h, w]
    if fmt == "NHWC":
        _, h, w, c = shape
        if c % groups:
            return None
        return [0, h, w, groups, c // groups], [0, 1, 2, 4, 3], [0, h, w, c]
    return None


def _fix_channel_shuffle(block, index, op) -> int:
    plan = _channel_shuffle_plan(op)
    if plan is None:
        return 0
    shape1, perm, shape2 = plan
    x, out = op.desc.input("X")[0], op.desc.output("Out")[0]
    xvar = block._var_recursive(x)
    in_shape = list(xvar.shape)
    mid_shape = [in_shape[0], *shape1[1:]]
    t_shape = [mid_shape[i] for i in perm]

    def var(suffix, shp):
        name = _unique_var_name(block, f"{out}.{suffix}")
        block.create_var(name=name, shape=shp, dtype=xvar.dtype, persistable=False, stop_gradient=True)
        return name

    r1, r1x = var("shuffle_r1", mid_shape), var("shuffle_r1.xshape", [0, *in_shape])
    t1, t1x = var("shuffle_t", t_shape), var("shuffle_t.xshape", [0, *mid_shape])
    r2x = var("shuffle_r2.xshape", [0, *t_shape])
    block._remove_op(index)
    new_ops = [
        block._insert_op(index, type="reshape2", inputs={"X": [x]},
                         outputs={"Out": [r1], "XShape": [r1x]}, attrs={"shape": shape1}),
        block._insert_op(index + 1, type="transpose2", inputs={"X": [r1]},
                         outputs={"Out": [t1], "XShape": [t1x]}, attrs={"axis": perm}),
        block._insert_op(index + 2, type="reshape2", inputs={"X": [t1]},
                         outputs={"Out": [out], "XShape": [r2x]}, attrs={"shape": shape2}),
    ]
    for new in new_ops:
        _strip_extras(new)
    return 1


def _adaptive_pool_sizes(op) -> tuple[int | None, list, list[int]] | None:
    """(C, [H, W], [out_h, out_w]) of an adaptive, non-global NCHW pool2d with a 4-D input (H,
    W, C may be None/-1 when dynamic); None for any other op."""
    if op.type != "pool2d" or not _has_attr(op, "adaptive") or not op.attr("adaptive"):
        return None
    if _has_attr(op, "global_pooling") and op.attr("global_pooling"):
        return None
    fmt = op.attr("data_format") if _has_attr(op, "data_format") else "NCHW"
    shape = _var_shape(op.block, op.desc.input("X")[0])
    out_hw = [int(v) for v in op.attr("ksize")]
    if fmt != "NCHW" or shape is None or len(shape) != 4 or len(out_hw) != 2:
        return None
    return shape[1], shape[2:], out_hw


def _upsampling_pool_plan(op) -> tuple[int, int, int, int, int] | None:
    """(C, H, W, kh, kw) for an adaptive pool2d whose output is an integer multiple of its
    static input in both dims and larger in at least one: then every bin holds exactly one
    input pixel (bin i of O = k*H spans [floor(i/k), floor(i/k) + 1)), so avg and max pooling
    are both nearest-neighbour replication by k."""
    sizes = _adaptive_pool_sizes(op)
    if sizes is None:
        return None
    c, (h, w), (oh, ow) = sizes
    if any(d is None or d <= 0 for d in (c, h, w)):
        return None
    if oh % h or ow % w or (oh == h and ow == w):
        return None
    return c, h, w, oh // h, ow // w


def _upsampling_pool_unfixable(op) -> bool:
    """An adaptive pool2d that upsamples (an output dim larger than the static input's) and
    that ``upsampling-pool-to-expand`` cannot rewrite (a non-integer factor). A dynamic size is
    not flagged: most such pools shrink, and convert.onnx still refuses a stride-0 pool after
    conversion."""
    sizes = _adaptive_pool_sizes(op)
    if sizes is None or _upsampling_pool_plan(op) is not None:
        return False
    _, hw, out_hw = sizes
    return any(d is not None and d > 0 and o > d for d, o in zip(hw, out_hw))


def _fix_upsampling_pool(block, index, op) -> int:
    """pool2d(adaptive, output k x the input) -> reshape2 [N, C, H, 1, W, 1], expand_v2
    [N, C, H, kh, W, kw], reshape2 [N, C, H*kh, W*kw]: the same values, bit for bit."""
    plan = _upsampling_pool_plan(op)
    if plan is None:
        return 0
    c, h, w, kh, kw = plan
    x, out = op.desc.input("X")[0], op.desc.output("Out")[0]
    xvar = block._var_recursive(x)
    n = list(xvar.shape)[0]

    def var(suffix, shp):
        name = _unique_var_name(block, f"{out}.{suffix}")
        block.create_var(name=name, shape=shp, dtype=xvar.dtype, persistable=False, stop_gradient=True)
        return name

    six = [n, c, h, 1, w, 1]
    big = [n, c, h, kh, w, kw]
    r1, r1x = var("upsample_r1", six), var("upsample_r1.xshape", [0, n, c, h, w])
    e1 = var("upsample_expand", big)
    r2x = var("upsample_r2.xshape", [0, *big])
    block._remove_op(index)
    new_ops = [
        block._insert_op(index, type="reshape2", inputs={"X": [x]},
                         outputs={"Out": [r1], "XShape": [r1x]}, attrs={"shape": [0, c, h, 1, w, 1]}),
        block._insert_op(index + 1, type="expand_v2", inputs={"X": [r1]}, outputs={"Out": [e1]},
                         attrs={"shape": [-1, c, h, kh, w, kw]}),
        block._insert_op(index + 2, type="reshape2", inputs={"X": [e1]},
                         outputs={"Out": [out], "XShape": [r2x]}, attrs={"shape": [0, c, h * kh, w * kw]}),
    ]
    for new in new_ops:
        _strip_extras(new)
    return 1


_LITE = frozenset({"lite"})

REWRITES: tuple[Rewrite, ...] = (
    _missing_attrs_rewrite(
        "relu6-threshold", "relu6", {"threshold": 6.0},
        'paddle_lite_opt aborts (SIGABRT): "Check failed: it != attrs().end(): No attributes '
        'called threshold found for relu6"'),
    _missing_attrs_rewrite(
        "swish-beta", "swish", {"beta": 1.0},
        'paddle_lite_opt aborts (SIGABRT): "Check failed: it != attrs().end(): No attributes '
        'called beta found for swish"'),
    Rewrite(
        name="flatten-to-reshape2",
        description="flatten_contiguous_range -> reshape2 with the equivalent shape attribute "
                    "(0 for the leading dims, the static size or -1 for the flattened range, "
                    "the static trailing dims)",
        backends=_LITE,
        valid_targets=None,
        match=_flatten_reshapable,
        fix=_fix_flatten_to_reshape2,
        problem="Paddle 3.x writes flatten_contiguous_range without its XShape output; "
                "paddle_lite_opt dereferences it in FlattenContiguousRangeOp::InferType "
                "(VariablePlaceInferencePass) and dies with SIGSEGV: always on x86, on arm "
                "whenever the flatten is not fused into a directly following matmul",
    ),
    Rewrite(
        name="flatten-xshape",
        description="flatten_contiguous_range that cannot become reshape2 (dynamic trailing "
                    "dims): restore its XShape output (shape (0, *X.shape), never read at "
                    "inference)",
        backends=_LITE,
        valid_targets=None,
        match=_flatten_no_xshape,
        fix=_fix_flatten_xshape,
        problem="paddle_lite_opt SIGSEGV in FlattenContiguousRangeOp::InferType (missing XShape)",
    ),
    Rewrite(
        name="instance-norm-saved-stats",
        description="instance_norm: restore the SavedMean/SavedVariance outputs (shape [N*C], "
                    "not read at inference) that Paddle 3.x no longer writes",
        backends=_LITE,
        valid_targets=None,
        match=_instance_norm_no_stats,
        fix=_fix_instance_norm_stats,
        problem='paddle_lite_opt aborts (SIGABRT): "op_lite.cc AttachOutput:176] Check failed: '
                'is_dispensable || is_have_output"',
    ),
    Rewrite(
        name="brelu-to-clip",
        description="brelu (paddle.nn.Hardtanh) -> clip(min=t_min, max=t_max), the same function",
        backends=_LITE,
        valid_targets=None,
        match=_is_brelu,
        fix=_fix_brelu_to_clip,
        problem="paddle_lite_opt: \"This model is not supported, because 1 ops are not supported "
                "on 'arm'. These unsupported ops are: 'brelu'.\" (same on x86)",
    ),
    Rewrite(
        name="fill-constant-0d",
        description="fill_constant with shape [] (a 0-D constant, e.g. the 0 in `x > 0`) -> "
                    "shape [1], only when every consumer is a broadcasting elementwise, compare "
                    "or where op whose other operand has rank >= 1 (same output shape)",
        backends=_LITE,
        valid_targets=None,
        match=_scalar_fill_promotable,
        fix=_fix_scalar_fill,
        problem="converts, then the Paddle Lite runtime aborts (SIGABRT): \"fill_constant_op.cc:44 "
                "InferShapeImpl] no valid out_shape. Must set one of shape_tensor, or "
                "shape_tensor_list, or shape.\"",
    ),
    Rewrite(
        name="pow2-to-square",
        description="pow(x, factor=2) -> square(x); square is the correctly rounded x*x, "
                    "Paddle's pow kernel differs from it by at most 1 ulp on some elements",
        backends=_LITE,
        valid_targets=frozenset({"x86"}),
        match=_is_pow2,
        fix=_fix_pow2_to_square,
        exact=False,
        problem="converts, then the Paddle Lite x86 pow kernel returns inf for every negative "
                "base",
    ),
    Rewrite(
        name="channel-shuffle-to-transpose",
        description="channel_shuffle (paddle.nn.ChannelShuffle) -> reshape2, transpose2, "
                    "reshape2 (pure data movement, bit-identical; needs static C, H, W)",
        backends=_LITE,
        valid_targets=None,
        match=lambda op: _channel_shuffle_plan(op) is not None,
        fix=_fix_channel_shuffle,
        problem="paddle_lite_opt: \"This model is not supported, because 1 ops are not supported "
                "on 'arm'. These unsupported ops are: 'channel_shuffle'.\" (same on x86)",
    ),    Rewrite(
        name="upsampling-pool-to-expand",
        description="adaptive pool2d whose output is an integer multiple (k) of its static input, "
                    "e.g. vgg16's AdaptiveAvgPool2D(7) on a 1x1 feature map -> reshape2, expand_v2, "
                    "reshape2 (every bin holds one pixel: nearest-neighbour replication, "
                    "bit-identical)",
        backends=frozenset({"onnx"}),
        valid_targets=None,
        match=lambda op: _upsampling_pool_plan(op) is not None,
        fix=_fix_upsampling_pool,
        problem="paddle2onnx 1.3.1 writes an AveragePool/MaxPool with strides [0, 0] (input size // "
                "output size) and onnxruntime dies of SIGFPE running it",
    ),
)


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

    Returns ``[{"rewrite": name, "ops": n}, ...]`` for the rewrites that changed something
    (n > 0), in the order they ran; ``[]`` when none did, and then the input files are copied
    byte for byte.
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
        return []

    with _StaticLegacy() as paddle, private_scope(paddle) as (scope, exe):
        try:
            program, feed_names, fetch_vars = paddle.static.load_inference_model(
                str(src_dir / "model"), exe)
        except Exception as err:  # paddle raises bare RuntimeError/ValueError here
            raise PassError(PASS_NAME, f"cannot load {src_dir}: {err}") from err
        want_feeds, want_fetches = list(feed_names), [v.name for v in fetch_vars]
        report = []
        for rewrite in rewrites:
            n = rewrite.apply(program, scope)
            if n:
                report.append({"rewrite": rewrite.name, "ops": n})
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


# --------------------------------------------------------------------------------------------
# pre-flight


@dataclass(frozen=True)
class Finding:
    """An op the target cannot take, and what to do about it."""

    op: str
    count: int
    reason: str
    remedy: str  # "rewrite <name> applies" | "keep the layer in float" | "use the onnx backend" | ...


# Quantized-graph ops: the Paddle Lite 2.13 x86 INT8 kernels run but give wrong outputs
# (TOOLCHAIN trap 4).
_QUANT_OPS = frozenset({
    "quantize_linear", "dequantize_linear", "fake_quantize_abs_max",
    "fake_quantize_moving_average_abs_max", "fake_quantize_range_abs_max",
    "fake_quantize_dequantize_moving_average_abs_max", "fake_quantize_dequantize_abs_max",
    "fake_channel_wise_quantize_abs_max", "fake_channel_wise_quantize_dequantize_abs_max",
    "fake_dequantize_max_abs", "fake_channel_wise_dequantize_max_abs",
})


@dataclass(frozen=True)
class _Hazard:
    """An op form known to crash the converter or to give wrong answers on a target, that
    no rewrite here removes."""

    op: str
    backends: frozenset[str]
    valid_targets: frozenset[str] | None
    match: Callable[[Any], bool]
    reason: str
    remedy: str


_HAZARDS: tuple[_Hazard, ...] = (
    _Hazard(
        "pow", frozenset({"lite"}), frozenset({"x86"}), lambda op: op.type == "pow" and not _is_pow2(op),
        "Paddle Lite 2.13 x86 pow kernel returns inf for negative bases (it converts, then "
        "computes wrong outputs)",
        "use the onnx backend (or keep the base non-negative)"),
    _Hazard(
        "fill_constant", frozenset({"lite"}), None,
        lambda op: op.type == "fill_constant" and list(op.attr("shape")) == []
        and not _scalar_fill_promotable(op),
        "0-D constant (shape []): the model converts but the Paddle Lite runtime aborts "
        '"no valid out_shape. Must set one of shape_tensor, or shape_tensor_list, or shape"',
        "use the onnx backend"),
    _Hazard(
        "quantized ops", frozenset({"lite"}), frozenset({"x86"}), lambda op: op.type in _QUANT_OPS,
        "Paddle Lite 2.13 x86 INT8 kernels run but give wrong outputs (chance-level accuracy)",
        "keep the layer in float"),
    _Hazard(
        "pool2d", frozenset({"onnx"}), None, _upsampling_pool_unfixable,
        "adaptive pool whose output is larger than its input by a non-integer factor: paddle2onnx 1.3.1 writes a pool with stride 0 and onnxruntime dies "
        "of SIGFPE (edgeforge refuses the converted model)",
        "use a larger input, or --backend lite"),
)

_CHILD_TIMEOUT_S = 120

_LITE_SUPPORTED_SNIPPET = r"""
import sys
import paddlelite.lite as lite
opt = lite.Opt()
opt.set_valid_places(sys.argv[1])
sys.stdout.flush()
opt.print_supported_ops()
"""

_ONNX_SUPPORTED_SNIPPET = r"""
import os
os.environ.setdefault("FLAGS_enable_pir_api", "0")
from paddle2onnx.paddle2onnx_cpp2py_export import get_all_supported_operators
print("\n".join(get_all_supported_operators()))
"""


def _run_child(code: str, *args: str) -> str | None:
    """Run a snippet in a fresh interpreter: the converters kill their own process on errors."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    try:
        res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                             timeout=_CHILD_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout if res.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def supported_ops(backend: str, valid_targets: tuple[str, ...] = ()) -> frozenset[str] | None:
    """Op types the frozen converter accepts for ``backend``/``valid_targets``; None when the
    converter is not installed or cannot say."""
    if backend == "lite":
        out = _run_child(_LITE_SUPPORTED_SNIPPET, ",".join(valid_targets))
        if out is None:
            return None
        ops, started = set(), False
        for line in out.splitlines():
            fields = line.split()
            if not fields:
                continue
            if fields[0] == "OP_name":
                started = True
                continue
            if started and re.fullmatch(r"[A-Za-z0-9_]+", fields[0]) and len(fields) > 1:
                ops.add(fields[0])
        return frozenset(ops) or None
    if backend == "onnx":
        out = _run_child(_ONNX_SUPPORTED_SNIPPET)
        ops = frozenset(line.strip() for line in (out or "").splitlines() if line.strip())
        return ops or None
    return None


def _count_ops(program, pred: Callable[[Any], bool]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for block in program.blocks:
        for op in block.ops:
            if pred(op):
                counts[op.type] = counts.get(op.type, 0) + 1
    return counts


def preflight(model_dir: Path, backend: str, valid_targets: list[str],
              after_legalize: bool = True) -> list[Finding]:
    """List the ops of the model in ``model_dir`` that ``backend``/``valid_targets`` cannot
    take, each with what to do. Reads only model.pdmodel; the converter's supported-op list
    comes from a child process (cached).

    ``after_legalize=True``: judge the model as ``legalize_model`` would leave it (the
    rewrites are applied in memory). ``False``: judge it as it is, and name the rewrite that
    fixes each op it can fix.
    """
    targets = _check_backend(backend, valid_targets)
    model_file, _ = _model_files(model_dir)
    program = _parse_program(model_file)
    findings: list[Finding] = []
    handled: set[str] = set()

    rewrites = rewrites_for(backend, targets)
    if after_legalize:
        for rewrite in rewrites:
            if rewrite.applies(program):
                rewrite.apply(program, None)
    else:
        # each op is credited to the first rewrite that takes it (the order legalize uses)
        per_rewrite: dict[tuple[str, str], int] = {}
        for block in program.blocks:
            for op in block.ops:
                for rewrite in rewrites:
                    if rewrite.match(op):
                        key = (rewrite.name, op.type)
                        per_rewrite[key] = per_rewrite.get(key, 0) + 1
                        break
        by_name = {r.name: r for r in rewrites}
        for (name, op_type), n in per_rewrite.items():
            findings.append(Finding(op_type, n, by_name[name].problem, f"rewrite {name} applies"))
            handled.add(op_type)

    for hazard in _HAZARDS:
        if backend not in hazard.backends:
            continue
        if hazard.valid_targets is not None and not hazard.valid_targets & set(targets):
            continue
        counts = _count_ops(program, hazard.match)
        for op_type, n in counts.items():
            if op_type in handled:
                continue
            findings.append(Finding(op_type, n, hazard.reason, hazard.remedy))
            handled.add(op_type)

    supported = supported_ops(backend, tuple(targets))
    if supported is not None:
        missing = _count_ops(program, lambda op: op.type not in ("feed", "fetch")
                             and op.type not in supported and op.type not in handled)
        onnx = supported_ops("onnx") if backend == "lite" and missing else None
        where = f"valid_targets={','.join(targets)}" if backend == "lite" else "paddle2onnx"
        for op_type, n in sorted(missing.items()):
            if onnx is not None and op_type in onnx:
                remedy = "use the onnx backend"
            elif op_type in _QUANT_OPS:
                remedy = "keep the layer in float"
            else:
                remedy = "replace the layer: no converter here takes this op"
            findings.append(Finding(op_type, n, f"not in the {backend} converter's supported ops ({where})",
                                    remedy))
    return findings
