"""Op helpers for the rewrites (all work on paddle.base.framework.Operator / Block)."""
from __future__ import annotations

# Attributes set by Paddle on every op it builds; never part of what a converter reads.
_NOISE_ATTRS = ("op_callstack", "op_namescope", "with_quant_attr")


def has_attr(op, name: str) -> bool:
    return name in op.desc.attr_names()  # desc.has_attr() also says yes for clipped "extra" attrs


def set_float_attr(op, name: str, value: float) -> None:
    op.desc._set_float32_attr(name, float(value))  # FLOAT: what Lite's GetAttr<float> wants


def op_inputs(op, slot: str) -> list[str]:
    return list(op.desc.input(slot)) if slot in op.desc.input_names() else []


def has_output(op, slot: str) -> bool:
    return slot in op.desc.output_names() and len(op.desc.output(slot)) > 0


def unique_var_name(block, base: str) -> str:
    name, k = base, 0
    while block.has_var(name) or block.program.global_block().has_var(name):
        k += 1
        name = f"{base}_{k}"
    return name


def var_shape(block, name: str) -> list[int] | None:
    try:
        return list(block._var_recursive(name).shape)
    except ValueError:
        return None


def add_xshape(block, op) -> None:
    """Give ``op`` the XShape output older Paddle wrote: shape (0, *X.shape), never read."""
    x = op.desc.input("X")[0]
    out = op.desc.output("Out")[0]
    xvar = block._var_recursive(x)
    name = unique_var_name(block, f"{out}.xshape")
    block.create_var(name=name, shape=[0, *xvar.shape], dtype=xvar.dtype, persistable=False,
                     stop_gradient=True)
    op.desc.set_output("XShape", [name])


def strip_extras(op) -> None:
    """Drop the attributes Paddle adds to a fresh op that ``jit.save`` would have clipped."""
    from paddle.base import core

    for name in list(core.get_op_extra_attrs(op.type).keys()) + list(_NOISE_ATTRS):
        if has_attr(op, name):
            op.desc.remove_attr(name)
