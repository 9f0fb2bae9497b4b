"""The op surgery behind each rewrite: ``match(op)`` predicates and ``fix(block, index, op)``
functions (see :mod:`.rewrites` for the table that pairs them)."""
from __future__ import annotations

from .ops import add_xshape, has_attr, has_output, op_inputs, strip_extras, unique_var_name, var_shape


def flatten_no_xshape(op) -> bool:
    return op.type == "flatten_contiguous_range" and not has_output(op, "XShape")


def fix_flatten_xshape(block, index, op) -> int:
    add_xshape(block, op)
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


def flatten_reshapable(op) -> bool:
    if op.type != "flatten_contiguous_range":
        return False
    shape = var_shape(op.block, op.desc.input("X")[0])
    return shape is not None and _flatten_reshape_shape(
        shape, op.attr("start_axis"), op.attr("stop_axis")) is not None


def fix_flatten_to_reshape2(block, index, op) -> int:
    x = op.desc.input("X")[0]
    out = op.desc.output("Out")[0]
    shape = _flatten_reshape_shape(var_shape(block, x), op.attr("start_axis"), op.attr("stop_axis"))
    if shape is None:
        return 0
    xvar = block._var_recursive(x)
    xshape = op.desc.output("XShape")[0] if has_output(op, "XShape") else None
    if xshape is None:
        xshape = unique_var_name(block, f"{out}.xshape")
        block.create_var(name=xshape, shape=[0, *xvar.shape], dtype=xvar.dtype, persistable=False,
                         stop_gradient=True)
    block._remove_op(index)
    new = block._insert_op(index, type="reshape2", inputs={"X": [x]},
                           outputs={"Out": [out], "XShape": [xshape]}, attrs={"shape": shape})
    strip_extras(new)
    return 1


def instance_norm_no_stats(op) -> bool:
    return op.type == "instance_norm" and not (
        has_output(op, "SavedMean") and has_output(op, "SavedVariance"))


def fix_instance_norm_stats(block, index, op) -> int:
    """Restore SavedMean/SavedVariance (shape [N*C]); Lite attaches them as required outputs."""
    x = block._var_recursive(op.desc.input("X")[0])
    n, c = (list(x.shape) + [-1, -1])[:2]
    size = n * c if n is not None and c is not None and n > 0 and c > 0 else -1
    y = op.desc.output("Y")[0]
    for slot in ("SavedMean", "SavedVariance"):
        if not has_output(op, slot):
            name = unique_var_name(block, f"{y}.{slot.lower()}")
            block.create_var(name=name, shape=[size], dtype=x.dtype, persistable=False,
                             stop_gradient=True)
            op.desc.set_output(slot, [name])
    return 1


def is_brelu(op) -> bool:
    return op.type == "brelu"


def fix_brelu_to_clip(block, index, op) -> int:
    """brelu(t_min, t_max) is min(max(x, t_min), t_max): exactly clip(min, max)."""
    x, out = op.desc.input("X")[0], op.desc.output("Out")[0]
    lo, hi = float(op.attr("t_min")), float(op.attr("t_max"))
    block._remove_op(index)
    new = block._insert_op(index, type="clip", inputs={"X": [x]}, outputs={"Out": [out]},
                           attrs={"min": lo, "max": hi})
    strip_extras(new)
    new.desc._set_float32_attr("min", lo)
    new.desc._set_float32_attr("max", hi)
    return 1


def is_pow2(op) -> bool:
    return (op.type == "pow" and not op_inputs(op, "FactorTensor")
            and float(op.attr("factor")) == 2.0)


def fix_pow2_to_square(block, index, op) -> int:
    """pow(x, 2) -> square(x): the same product, and Lite's x86 pow kernel returns inf for
    every negative base (it goes through log)."""
    x, out = op.desc.input("X")[0], op.desc.output("Out")[0]
    block._remove_op(index)
    new = block._insert_op(index, type="square", inputs={"X": [x]}, outputs={"Out": [out]})
    strip_extras(new)
    return 1


# ops for which a [1]-shaped operand broadcasts exactly like a 0-D one, given that the
# other operand has rank >= 1 (the output shape is the other operand's either way)
_BROADCAST_OPS = frozenset({
    "elementwise_add", "elementwise_sub", "elementwise_mul", "elementwise_div",
    "elementwise_max", "elementwise_min", "elementwise_pow", "elementwise_mod",
    "elementwise_floordiv", "greater_than", "greater_equal", "less_than", "less_equal",
    "equal", "not_equal", "where",
})


def scalar_fill_promotable(op) -> bool:
    if op.type != "fill_constant" or list(op.attr("shape")) != []:
        return False
    if any(op_inputs(op, slot) for slot in ("ShapeTensor", "ShapeTensorList", "ValueTensor")):
        return False
    block = op.block
    out = op.desc.output("Out")[0]
    users = [o for o in block.ops if out in o.desc.input_arg_names()]
    if not users:
        return False
    for user in users:
        if user.type == "fill_constant" and out in user.desc.input("ShapeTensorList"):
            continue      # one size of a shape list (nn.LSTM's initial state): one value either way
        if user.type not in _BROADCAST_OPS:
            return False  # fetch, reshape, concat ... would see the rank change
        others = [n for n in user.desc.input_arg_names() if n != out]
        if not others:
            return False
        for n in others:
            shape = var_shape(block, n)
            if shape is None or len(shape) < 1:
                return False
    return True


def fix_scalar_fill(block, index, op) -> int:
    op.desc._set_int64s_attr("shape", [1])
    block._var_recursive(op.desc.output("Out")[0]).desc.set_shape([1])
    return 1


def channel_shuffle_plan(op) -> tuple[list[int], list[int], list[int]] | None:
    """(shape1, perm, shape2) for channel_shuffle as reshape2 -> transpose2 -> reshape2."""
    if op.type != "channel_shuffle":
        return None
    shape = var_shape(op.block, op.desc.input("X")[0])
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


def fix_channel_shuffle(block, index, op) -> int:
    plan = channel_shuffle_plan(op)
    if plan is None:
        return 0
    shape1, perm, shape2 = plan
    x, out = op.desc.input("X")[0], op.desc.output("Out")[0]
    xvar = block._var_recursive(x)
    in_shape = list(xvar.shape)
    mid_shape = [in_shape[0], *shape1[1:]]
    t_shape = [mid_shape[i] for i in perm]

    def var(suffix, shp):
        name = unique_var_name(block, f"{out}.{suffix}")
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
        strip_extras(new)
    return 1


def _adaptive_pool_sizes(op) -> tuple[int | None, list, list[int]] | None:
    """(C, [H, W], [out_h, out_w]) of an adaptive, non-global NCHW pool2d with a 4-D input (H,
    W, C may be None/-1 when dynamic); None for any other op."""
    if op.type != "pool2d" or not has_attr(op, "adaptive") or not op.attr("adaptive"):
        return None
    if has_attr(op, "global_pooling") and op.attr("global_pooling"):
        return None
    fmt = op.attr("data_format") if has_attr(op, "data_format") else "NCHW"
    shape = var_shape(op.block, op.desc.input("X")[0])
    out_hw = [int(v) for v in op.attr("ksize")]
    if fmt != "NCHW" or shape is None or len(shape) != 4 or len(out_hw) != 2:
        return None
    return shape[1], shape[2:], out_hw


def upsampling_pool_plan(op) -> tuple[int, int, int, int, int] | None:
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


def upsampling_pool_unfixable(op) -> bool:
    """An adaptive pool2d that upsamples (an output dim larger than the static input's) and
    that ``upsampling-pool-to-expand`` cannot rewrite (a non-integer factor). A dynamic size is
    not flagged: most such pools shrink, and convert.onnx still refuses a stride-0 pool after
    conversion."""
    sizes = _adaptive_pool_sizes(op)
    if sizes is None or upsampling_pool_plan(op) is not None:
        return False
    _, hw, out_hw = sizes
    return any(d is not None and d > 0 and o > d for d, o in zip(hw, out_hw))


def fix_upsampling_pool(block, index, op) -> int:
    """pool2d(adaptive, output k x the input) -> reshape2 [N, C, H, 1, W, 1], expand_v2
    [N, C, H, kh, W, kw], reshape2 [N, C, H*kh, W*kw]: the same values, bit for bit."""
    plan = upsampling_pool_plan(op)
    if plan is None:
        return 0
    c, h, w, kh, kw = plan
    x, out = op.desc.input("X")[0], op.desc.output("Out")[0]
    xvar = block._var_recursive(x)
    n = list(xvar.shape)[0]

    def var(suffix, shp):
        name = unique_var_name(block, f"{out}.{suffix}")
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
        strip_extras(new)
    return 1
