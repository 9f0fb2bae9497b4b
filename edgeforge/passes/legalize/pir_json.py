"""PIR programs for paddle2onnx 2.1: what Paddle 3.3's ``.json`` writes that its parser refuses.

paddle2onnx 2.1.0 was built against an earlier Paddle 3; Paddle 3.3.1 writes some attributes
with other element types than its parser reads. Each fix here rewrites the ``.json`` that goes
to the converter (never the program verify runs: Paddle itself reads the original), and is
exact: the value is the same number in the type the parser wants.

- ``*_interp`` ``scale`` (``F.interpolate(scale_factor=2)``): Paddle 3.3 writes an array of
  ``f64``; paddle2onnx reads ``std::vector<float>`` and stops: "(Unimplemented) the 0th
  elementwise MUST be ir::FloatAttribute (at paddle2onnx/parser/pir_parser.cc:814)". The
  scales are small integers or ratios that float32 holds exactly or to 1 ulp.
- Scalar ``f64`` attributes of the other ops (``softplus`` ``beta``/``threshold``,
  ``leaky_relu`` ``negative_slope``, ``group_norm`` ``epsilon``, ...): paddle2onnx's mappers
  read them as ``float``, find no ``FloatAttribute`` and keep their default. softplus then
  stops the conversion ("Only support softplus with beta == 1.0", a SIGABRT), leaky_relu
  converts silently wrong (slope 0.02 for 0.1: abs error 0.43 on a conv output of 17). The
  ops compute in float32, so the value in f32 is the one they use. Ops whose f64 attribute is
  a Scalar value (``full`` and friends: int64 values above 2**24 would round) are left as they are.
"""
from __future__ import annotations

import json
from pathlib import Path

_INTERP = ("1.bilinear_interp", "1.nearest_interp", "1.bicubic_interp", "1.linear_interp",
           "1.trilinear_interp")


def program_ops(node):
    """Every op dict of a PIR program's JSON, nested regions included."""
    if isinstance(node, dict):
        if isinstance(node.get("#"), str) and "A" in node:
            yield node
        for value in node.values():
            yield from program_ops(value)
    elif isinstance(node, list):
        for value in node:
            yield from program_ops(value)


def fix_interp_scale(op) -> int:
    if op.get("#") not in _INTERP:
        return 0
    n = 0
    for attr in op["A"]:
        at = attr.get("AT") or {}
        if attr.get("N") == "scale" and at.get("#") == "0.a_array":
            for element in at.get("D", []):
                if isinstance(element, dict) and element.get("#") == "0.a_f64":
                    element["#"] = "0.a_f32"
                    n += 1
    return 1 if n else 0


_SCALAR_VALUE_OPS = frozenset({"1.full", "1.full_like", "1.full_with_tensor", "1.assign_value",
                               "1.assign_value_", "1.set_value", "1.set_value_", "1.arange",
                               "1.linspace", "1.uniform", "1.gaussian", "1.randint"})


def fix_f64_scalars(op) -> int:
    if op.get("#") in _SCALAR_VALUE_OPS or not isinstance(op.get("A"), list):
        return 0
    n = 0
    for attr in op["A"]:
        at = attr.get("AT") if isinstance(attr, dict) else None
        if isinstance(at, dict) and at.get("#") == "0.a_f64":
            at["#"] = "0.a_f32"
            n += 1
    return 1 if n else 0


FIXES = {"interp-scale-f32": fix_interp_scale, "f64-attrs-f32": fix_f64_scalars}


def for_paddle2onnx(src: Path, dst: Path) -> list[dict]:
    """Write ``src`` (a PIR ``.json``) to ``dst`` with the fixes; returns what was changed,
    ``[{"rewrite": name, "ops": n}]`` (empty: ``dst`` is a copy)."""
    program = json.loads(Path(src).read_text())
    counts = dict.fromkeys(FIXES, 0)
    for op in program_ops(program.get("program", program)):
        for name, fix in FIXES.items():
            counts[name] += fix(op)
    Path(dst).write_text(json.dumps(program, separators=(",", ":")))
    return [{"rewrite": name, "ops": n} for name, n in counts.items() if n]


# the PIR ops of adaptive pooling, and their names in paddle2onnx 2.1's ONNX output
_ADAPTIVE_POOLS = {"1.pool2d": "pd_op.pool2d", "1.max_pool2d_with_index": "pd_op.max_pool2d_with_index"}


def _dims(value: dict) -> list[int] | None:
    tt = value.get("TT") if isinstance(value, dict) else None
    data = tt.get("D") if isinstance(tt, dict) else None
    if isinstance(data, list) and len(data) > 1 and isinstance(data[1], list):
        return [int(d) for d in data[1]]
    return None


def _attr(op: dict, name: str):
    for attr in op.get("A") or []:
        if isinstance(attr, dict) and attr.get("N") == name:
            return (attr.get("AT") or {}).get("D")
    return None


def adaptive_pool_sizes(program: dict) -> dict[str, tuple[list[int], list[int]]]:
    """The adaptive NCHW 2-D pools of a PIR program with static spatial sizes, by the name
    paddle2onnx 2.1 gives their ONNX output (``p2o.pd_op.pool2d.<k>.0``: the k-th op of that
    type in program order): ``(input [H, W], output [H, W])``. paddle2onnx writes such a pool
    with stride ``input // output``, 0 when it upsamples; :func:`..onnx_graph.fix_upsampling_pools`
    needs the output size, which the ONNX node no longer holds."""
    shapes: dict[int, list[int]] = {}
    counts: dict[str, int] = {}
    found: dict[str, tuple[list[int], list[int]]] = {}
    for op in program_ops(program.get("program", program)):
        for out in op.get("O") or []:
            if isinstance(out, dict) and isinstance(out.get("%"), int) and _dims(out) is not None:
                shapes[out["%"]] = _dims(out)
        kind = _ADAPTIVE_POOLS.get(op.get("#"))
        if kind is None:
            continue
        name = f"p2o.{kind}.{counts.get(kind, 0)}.0"
        counts[kind] = counts.get(kind, 0) + 1
        if not _attr(op, "adaptive") or _attr(op, "global_pooling") or _attr(op, "data_format") not in (None, "NCHW"):
            continue
        src = (op.get("I") or [{}])[0].get("%")
        x, y = shapes.get(src), _dims((op.get("O") or [{}])[0])
        if x and y and len(x) == 4 and len(y) == 4 and min(x[2:] + y[2:]) > 0:
            found[name] = (x[2:], y[2:])
    return found
