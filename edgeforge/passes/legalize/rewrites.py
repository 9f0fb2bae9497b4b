"""The rewrites: one :class:`Rewrite` per converter failure, and the table of them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ...errors import ConfigError
from ...paddle_env import legacy_static
from .op_fixes import (
    channel_shuffle_plan,
    fix_brelu_to_clip,
    fix_channel_shuffle,
    fix_flatten_to_reshape2,
    fix_flatten_xshape,
    fix_instance_norm_stats,
    fix_pow2_to_square,
    fix_scalar_fill,
    fix_upsampling_pool,
    flatten_no_xshape,
    flatten_reshapable,
    instance_norm_no_stats,
    is_brelu,
    is_pow2,
    scalar_fill_promotable,
    upsampling_pool_plan,
)
from .ops import has_attr, set_float_attr

BACKENDS = frozenset({"lite", "onnx"})


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

    def apply(self, program, scope) -> int:  # scope: for rewrites that touch weights
        changed = 0
        with legacy_static():  # building an Operator needs static mode
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
        return op.type == op_type and any(not has_attr(op, a) for a in defaults)

    def fix(block, index, op) -> int:
        for attr, value in defaults.items():
            if not has_attr(op, attr):
                set_float_attr(op, attr, value)
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
        match=flatten_reshapable,
        fix=fix_flatten_to_reshape2,
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
        match=flatten_no_xshape,
        fix=fix_flatten_xshape,
        problem="paddle_lite_opt SIGSEGV in FlattenContiguousRangeOp::InferType (missing XShape)",
    ),
    Rewrite(
        name="instance-norm-saved-stats",
        description="instance_norm: restore the SavedMean/SavedVariance outputs (shape [N*C], "
                    "not read at inference) that Paddle 3.x no longer writes",
        backends=_LITE,
        valid_targets=None,
        match=instance_norm_no_stats,
        fix=fix_instance_norm_stats,
        problem='paddle_lite_opt aborts (SIGABRT): "op_lite.cc AttachOutput:176] Check failed: '
                'is_dispensable || is_have_output"',
    ),
    Rewrite(
        name="brelu-to-clip",
        description="brelu (paddle.nn.Hardtanh) -> clip(min=t_min, max=t_max), the same function",
        backends=_LITE,
        valid_targets=None,
        match=is_brelu,
        fix=fix_brelu_to_clip,
        problem="paddle_lite_opt: \"This model is not supported, because 1 ops are not supported "
                "on 'arm'. These unsupported ops are: 'brelu'.\" (same on x86)",
    ),
    Rewrite(
        name="fill-constant-0d",
        description="fill_constant with shape [] (a 0-D constant, e.g. the 0 in `x > 0`) -> "
                    "shape [1], only when every consumer is a broadcasting elementwise, compare "
                    "or where op whose other operand has rank >= 1 (same output shape), or a size in "
                    "a fill_constant ShapeTensorList (nn.LSTM/nn.GRU initial states)",
        backends=_LITE,
        valid_targets=None,
        match=scalar_fill_promotable,
        fix=fix_scalar_fill,
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
        match=is_pow2,
        fix=fix_pow2_to_square,
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
        match=lambda op: channel_shuffle_plan(op) is not None,
        fix=fix_channel_shuffle,
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
        match=lambda op: upsampling_pool_plan(op) is not None,
        fix=fix_upsampling_pool,
        problem="paddle2onnx 1.3.1 writes an AveragePool/MaxPool with strides [0, 0] (input size // "
                "output size) and onnxruntime dies of SIGFPE running it",
    ),
)


def check_backend(backend: str, valid_targets: Iterable[str]) -> list[str]:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}", hint=f"use one of {sorted(BACKENDS)}")
    targets = [str(t).strip().lower() for t in (valid_targets or [])]
    if backend == "lite" and not targets:
        raise ConfigError("backend lite needs valid_targets", hint='e.g. ["arm"] or ["x86"]')
    return targets


def rewrites_for(backend: str, valid_targets: list[str]) -> list[Rewrite]:
    """The rewrites that apply to ``backend`` with these Lite ``valid_targets``, in order."""
    targets = check_backend(backend, valid_targets)
    return [r for r in REWRITES if r.for_target(backend, targets)]
