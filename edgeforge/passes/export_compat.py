"""Legacy-program export of the Python APIs that Paddle 3.2+ routes straight to C++.

Root cause (docs/export.md): from Paddle 3.2 on, 56 Python APIs (``paddle.sigmoid``,
``paddle.tanh``, ``F.gelu``, ``F.softplus``, ``paddle.sum``, ``paddle.matmul``, ``paddle.abs``,
``paddle.argmax``, ``paddle.maximum``, ``paddle.multiply``, ...) are no longer Python functions
with a static-graph branch: they are the C++ bindings in ``paddle._C_ops`` themselves
(``from paddle._C_ops import sigmoid`` in ``paddle/tensor/ops.py``; the thin ``_sigmoid``
wrappers of ``paddle/base/dygraph/generated_tensor_methods_patch.py`` for ``paddle.sigmoid`` and
``paddle.Tensor.sigmoid``). Those bindings take eager Tensors and PIR Values only. The legacy
``Variable`` that ``paddle.jit.save`` traces with under ``FLAGS_enable_pir_api=0`` is rejected:
``TypeError: (InvalidType) sigmoid(): argument (position 1) must be Value, but got Variable``.
The legacy operators themselves (``sigmoid``, ``matmul_v2``, ``reduce_sum``, ``arg_max``, ...)
are still registered in C++ and still run in Paddle Inference.

:func:`legacy_apis` replaces those bindings, for the duration of an export, by wrappers that
append the legacy operator (as Paddle 3.1's Python did) when called with a legacy Variable and
call the original binding otherwise. Guarded: the routing file must have a known sha256 and each
operator's registered proto must have the inputs and attributes written here; otherwise nothing
(or that API) is patched and :func:`legacy_apis` says why.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib
import sys
import types
from typing import Callable

_ROUTING_MODULE = "paddle.base.dygraph.generated_tensor_methods_patch"
# sha256 of the routing file in the Paddle releases this patch was checked against
_KNOWN_ROUTING_SHA256 = {
    "6bc81604e977ab7cfdbdbbf83782772904d01aed4c456eb587f7debea5d8914d": "3.3.1",
}
_R = object()           # a required parameter
_ALIASES = {"input": "x", "other": "y", "dim": "axis"}
_UNARY = ("abs acos acosh asin atanh ceil cos cosh exp expm1 floor log log10 log1p log2 rsqrt "
          "sigmoid sin sinh sqrt tanh sign").split()


def _bind(name: str, spec: tuple, args: tuple, kwargs: dict) -> dict:
    names = [p for p, _ in spec]
    if len(args) > len(names):
        raise TypeError(f"{name}() takes at most {len(names)} arguments ({len(args)} given)")
    bound = dict(spec)
    bound.update(zip(names, args))
    for key, value in kwargs.items():
        key = _ALIASES.get(key, key)
        if key == "out":
            if value is not None:
                raise TypeError(f"{name}(out=...) cannot be exported to a legacy program")
            continue
        if key not in bound:
            raise TypeError(f"{name}() got an unexpected keyword argument '{key}'")
        bound[key] = value
    missing = [k for k, v in bound.items() if v is _R]
    if missing:
        raise TypeError(f"{name}() missing required argument '{missing[0]}'")
    bound.pop("name", None)
    return bound


def _append(op_type: str, inputs: dict, attrs: dict, dtype, out_slot: str = "Out"):
    from paddle.base.layer_helper import LayerHelper

    helper = LayerHelper(op_type)
    out = helper.create_variable_for_type_inference(dtype=dtype)
    helper.append_op(type=op_type, inputs=inputs, outputs={out_slot: out}, attrs=attrs)
    return out


def _var(value, like):
    """A Variable for a Python scalar operand (a [1] constant of ``like``'s dtype)."""
    import paddle
    from paddle.base.framework import Variable

    if isinstance(value, Variable):
        return value
    return paddle.full([1], value, dtype=like.dtype)


def _axes(axis, x) -> tuple[list, bool]:
    if axis is None:
        return [], True
    dims = [axis] if isinstance(axis, int) else list(axis)
    return dims, len(dims) == 0 or len(dims) == len(x.shape)


def _reduce(op_type: str, out_dtype=None):
    def build(x, axis=None, keepdim=False, dtype=None):
        import paddle
        from paddle.base.framework import convert_np_dtype_to_dtype_

        dims, reduce_all = _axes(axis, x)
        attrs = {"dim": dims, "keep_dim": bool(keepdim), "reduce_all": reduce_all}
        out = out_dtype if out_dtype is not None else x.dtype
        if dtype is not None:
            out = convert_np_dtype_to_dtype_(dtype)
        elif op_type == "reduce_sum" and x.dtype in (paddle.bool, paddle.int32):
            out = paddle.int64                       # as the C++ sum kernel promotes
        if out != x.dtype and out_dtype is None:
            attrs.update({"in_dtype": x.dtype, "out_dtype": out})
        return _append(op_type, {"X": x}, attrs, out)
    return build


def _arg(op_type: str):
    def build(x, axis=None, keepdim=False, dtype="int64"):
        from paddle.base.framework import convert_np_dtype_to_dtype_

        var_dtype = convert_np_dtype_to_dtype_(dtype)
        flatten = axis is None
        attrs = {"axis": 0 if flatten else int(axis), "keepdims": bool(keepdim), "flatten": flatten,
                 "dtype": var_dtype}
        out = _append(op_type, {"X": x}, attrs, var_dtype)
        out.stop_gradient = True
        return out
    return build


def _elementwise(op_type: str, out_bool: bool = False):
    def build(x, y):
        import paddle

        y = _var(y, x)
        attrs = {"axis": -1} if op_type.startswith("elementwise") else {}
        return _append(op_type, {"X": x, "Y": y}, attrs, paddle.bool if out_bool else x.dtype)
    return build


def _gelu(x, approximate=False):
    if isinstance(approximate, str):
        approximate = approximate == "tanh"
    return _append("gelu", {"X": x}, {"approximate": bool(approximate)}, x.dtype)


def _softplus(x, beta=1, threshold=20):
    return _append("softplus", {"X": x}, {"beta": float(beta), "threshold": float(threshold)}, x.dtype)


def _matmul(x, y, transpose_x=False, transpose_y=False):
    return _append("matmul_v2", {"X": x, "Y": y}, {"trans_x": bool(transpose_x), "trans_y": bool(transpose_y)},
                   x.dtype)


def _logsumexp(x, axis=None, keepdim=False):
    dims, reduce_all = _axes(axis, x)
    return _append("logsumexp", {"X": x}, {"axis": dims, "keepdim": bool(keepdim), "reduce_all": reduce_all},
                   x.dtype)


def _tri(lower: bool):
    def build(x, diagonal=0):
        return _append("tril_triu", {"X": x}, {"diagonal": int(diagonal), "lower": lower}, x.dtype)
    return build


def _roll(x, shifts, axis=None):
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    axis = [] if axis is None else ([axis] if isinstance(axis, int) else list(axis))
    return _append("roll", {"X": x}, {"shifts": shifts, "axis": axis}, x.dtype)


def _diagonal(x, offset=0, axis1=0, axis2=1):
    return _append("diagonal", {"Input": x}, {"offset": offset, "axis1": axis1, "axis2": axis2}, x.dtype)


def _expand_as(x, y):
    return _append("expand_as_v2", {"X": x, "Y": y}, {"target_shape": list(y.shape)}, x.dtype)


_NMS3_TYPES = {"score_threshold": float, "nms_top_k": int, "keep_top_k": int, "nms_threshold": float,
               "normalized": bool, "nms_eta": float, "background_label": int}


def _multiclass_nms3(bboxes, scores, rois_num=None, **attrs):
    """PaddleDetection's NMS (``ppdet.modeling.ops.multiclass_nms`` calls the binding): the
    legacy ``multiclass_nms3`` op, which Paddle Inference and Paddle Lite run. ``attrs``: the
    binding's score_threshold, nms_top_k, keep_top_k, nms_threshold, normalized, nms_eta,
    background_label. Returns the binding's (out [M, 6], index [M, 1], nms_rois_num [N])."""
    import paddle
    from paddle.base.layer_helper import LayerHelper

    helper = LayerHelper("multiclass_nms3")
    out = helper.create_variable_for_type_inference(dtype=bboxes.dtype)
    index = helper.create_variable_for_type_inference(dtype=paddle.int32)
    num = helper.create_variable_for_type_inference(dtype=paddle.int32)
    inputs = {"BBoxes": bboxes, "Scores": scores}
    if rois_num is not None:
        inputs["RoisNum"] = rois_num
    helper.append_op(type="multiclass_nms3", inputs=inputs, outputs={"Out": out, "Index": index, "NmsRoisNum": num},
                     attrs={k: _NMS3_TYPES[k](v) for k, v in attrs.items()})
    for v in (out, index, num):
        v.stop_gradient = True
    return out, index, num


def _unary(op_type: str, out_bool: bool = False):
    def build(x, **attrs):
        import paddle

        return _append(op_type, {"X": x}, attrs, paddle.bool if out_bool else x.dtype)
    return build


_X = (("x", _R), ("name", None))
_XY = (("x", _R), ("y", _R), ("name", None))
_RED = (("x", _R), ("axis", None), ("keepdim", False), ("name", None))
_ARG = (("x", _R), ("axis", None), ("keepdim", False), ("dtype", "int64"), ("name", None))
# API name -> (legacy op, parameters in the 3.3 API's order, builder, attrs the op must declare)
_APIS: dict[str, tuple[str, tuple, Callable, tuple]] = {
    **{n: (n, _X, _unary(n), ()) for n in _UNARY},
    "round": ("round", (("x", _R), ("decimals", 0), ("name", None)), _unary("round"), ("decimals",)),
    "isfinite": ("isfinite_v2", _X, _unary("isfinite_v2", True), ()),
    "isinf": ("isinf_v2", _X, _unary("isinf_v2", True), ()),
    "isnan": ("isnan_v2", _X, _unary("isnan_v2", True), ()),
    "logical_not": ("logical_not", _X, _unary("logical_not", True), ()),
    "gelu": ("gelu", (("x", _R), ("approximate", False), ("name", None)), _gelu, ("approximate",)),
    "softplus": ("softplus", (("x", _R), ("beta", 1), ("threshold", 20), ("name", None)), _softplus,
                 ("beta", "threshold")),
    "sum": ("reduce_sum", (("x", _R), ("axis", None), ("dtype", None), ("keepdim", False), ("name", None)),
            _reduce("reduce_sum"), ("dim", "keep_dim", "reduce_all", "in_dtype", "out_dtype")),
    "amax": ("reduce_amax", _RED, _reduce("reduce_amax"), ("dim", "keep_dim", "reduce_all")),
    "amin": ("reduce_amin", _RED, _reduce("reduce_amin"), ("dim", "keep_dim", "reduce_all")),
    "all": ("reduce_all", _RED, _reduce("reduce_all", "bool"), ("dim", "keep_dim", "reduce_all")),
    "any": ("reduce_any", _RED, _reduce("reduce_any", "bool"), ("dim", "keep_dim", "reduce_all")),
    "logsumexp": ("logsumexp", _RED, _logsumexp, ("axis", "keepdim", "reduce_all")),
    "argmax": ("arg_max", _ARG, _arg("arg_max"), ("axis", "keepdims", "flatten", "dtype")),
    "argmin": ("arg_min", _ARG, _arg("arg_min"), ("axis", "keepdims", "flatten", "dtype")),
    "matmul": ("matmul_v2", (("x", _R), ("y", _R), ("transpose_x", False), ("transpose_y", False),
                             ("name", None)), _matmul, ("trans_x", "trans_y")),
    "bmm": ("bmm", _XY, _elementwise("bmm"), ()),
    "dot": ("dot", _XY, _elementwise("dot"), ()),
    "maximum": ("elementwise_max", _XY, _elementwise("elementwise_max"), ("axis",)),
    "minimum": ("elementwise_min", _XY, _elementwise("elementwise_min"), ("axis",)),
    "multiply": ("elementwise_mul", _XY, _elementwise("elementwise_mul"), ("axis",)),
    "greater_than": ("greater_than", _XY, _elementwise("greater_than", True), ()),
    **{f"logical_{n}": (f"logical_{n}", _XY, _elementwise(f"logical_{n}", True), ()) for n in ("and", "or", "xor")},
    "tril": ("tril_triu", (("x", _R), ("diagonal", 0), ("name", None)), _tri(True), ("diagonal", "lower")),
    "triu": ("tril_triu", (("x", _R), ("diagonal", 0), ("name", None)), _tri(False), ("diagonal", "lower")),
    "roll": ("roll", (("x", _R), ("shifts", _R), ("axis", None), ("name", None)), _roll, ("shifts", "axis")),
    "diagonal": ("diagonal", (("x", _R), ("offset", 0), ("axis1", 0), ("axis2", 1), ("name", None)), _diagonal,
                 ("offset", "axis1", "axis2")),
    "expand_as": ("expand_as_v2", _XY, _expand_as, ("target_shape",)),
    "multiclass_nms3": ("multiclass_nms3", (("bboxes", _R), ("scores", _R), ("rois_num", None),
                                            ("score_threshold", _R), ("nms_top_k", _R), ("keep_top_k", _R),
                                            ("nms_threshold", 0.3), ("normalized", True), ("nms_eta", 1.0),
                                            ("background_label", -1)), _multiclass_nms3,
                        ("score_threshold", "nms_top_k", "keep_top_k", "nms_threshold", "normalized", "nms_eta",
                         "background_label")),
}
_USED: dict[str, int] = {}          # API -> legacy ops appended through the patch (this export)


def _proto_ok(op_type: str, attrs: tuple) -> bool:
    from paddle.base.framework import OpProtoHolder

    try:
        proto = OpProtoHolder.instance().get_op_proto(op_type)
    except ValueError:
        return False
    return set(attrs) <= {a.name for a in proto.attrs}


def _is_legacy(args: tuple, kwargs: dict) -> bool:
    from paddle.base.framework import Variable, in_dynamic_or_pir_mode

    if in_dynamic_or_pir_mode():
        return False
    return any(isinstance(a, Variable) for a in (*args, *kwargs.values()))


def _wrapper(name: str, original, spec: tuple, build: Callable):
    import paddle

    def legacy_or_original(*args, **kwargs):
        if _is_legacy(args, kwargs):
            _USED[name] = _USED.get(name, 0) + 1
            return build(**_bind(name, spec, args, kwargs))
        return original(*args, **kwargs)

    legacy_or_original.__name__ = legacy_or_original.__qualname__ = name
    legacy_or_original.__doc__ = original.__doc__
    legacy_or_original.__wrapped_builtin__ = original
    return paddle.jit.not_to_static(legacy_or_original)   # dy2static must call it, not transform it


def routing_sha256() -> str | None:
    try:
        mod = importlib.import_module(_ROUTING_MODULE)
        with open(mod.__file__, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except (ImportError, OSError, TypeError):
        return None


def _sites():
    """Every place that holds a binding: the paddle.* modules (not the C extension's own) and the
    legacy Variable class (its methods are the bindings too)."""
    from paddle.base.framework import Variable

    for mod_name, mod in list(sys.modules.items()):
        if (mod is None or not (mod_name == "paddle" or mod_name.startswith("paddle."))
                or mod_name.startswith(("paddle.base.libpaddle", "paddle._pir_ops"))):
            continue
        yield mod, vars(mod)
    yield Variable, dict(vars(Variable))


def _install() -> tuple[list, list[str], list[str]]:
    """Patch; returns (undo list, patched APIs, skipped 'api (why)')."""
    from paddle import _C_ops

    wrappers: dict[int, tuple] = {}
    patched, skipped = [], []
    for name, (op_type, spec, build, attrs) in _APIS.items():
        original = getattr(_C_ops, name, None)
        if not isinstance(original, types.BuiltinFunctionType):
            skipped.append(f"{name} (not a C++ binding here)")
            continue
        if not _proto_ok(op_type, attrs):
            skipped.append(f"{name} (legacy op {op_type} missing or changed)")
            continue
        wrappers[id(original)] = (original, _wrapper(name, original, spec, build))
        patched.append(name)
    undo = []
    for owner, members in _sites():
        for key, value in members.items():
            hit = wrappers.get(id(value))
            if hit is not None and hit[0] is value:
                setattr(owner, key, hit[1])
                undo.append((owner, key, value))
    return undo, patched, skipped


@contextlib.contextmanager
def legacy_apis():
    """Patch for the block; yields the status dict recorded in the manifest (``used`` filled in
    on exit: the APIs the export actually went through)."""
    import paddle

    sha = routing_sha256()
    status: dict = {"paddle": paddle.__version__, "routing_sha256": sha, "enabled": False,
                    "patched": [], "skipped": [], "used": {}}
    if sha is None:
        status["reason"] = f"{_ROUTING_MODULE} not found (Paddle before 3.2 has its own legacy branches)"
        yield status
        return
    if sha not in _KNOWN_ROUTING_SHA256:
        status["reason"] = (f"{_ROUTING_MODULE.rsplit('.', 1)[1]}.py differs from the Paddle versions checked "
                            f"({', '.join(_KNOWN_ROUTING_SHA256.values())}); not patched")
        yield status
        return
    undo, status["patched"], status["skipped"] = _install()
    status["enabled"] = bool(undo)
    status["reason"] = f"checked against Paddle {_KNOWN_ROUTING_SHA256[sha]}"
    _USED.clear()
    try:
        yield status
    finally:
        for owner, key, value in reversed(undo):
            setattr(owner, key, value)
        status["used"] = dict(sorted(_USED.items()))


@contextlib.contextmanager
def rnn_dropout_states(paddle, layer):
    """Recurrent layers (``nn.LSTM``, ``nn.GRU``, ``nn.SimpleRNN``) through the legacy export.

    Root cause (docs/export.md): ``RNNBase`` keeps ``_dropout_state``, a buffer made by
    ``create_variable`` that is never allocated in dygraph (its place is ``Place(undefined:0)``).
    The legacy trace turns every buffer into a static ``Variable`` through
    ``Tensor._to_static_var``, which reads each public property of the tensor; Paddle 3.3's new
    ``Tensor.device`` property is not in its skip list and raises ``ValueError: Unknown place
    type: Place(undefined:0)``. For the block, each such buffer is an allocated empty uint8
    tensor of the same name (the name keeps it non-persistable, out of ``.pdiparams``: Paddle
    Lite's loader refuses an empty parameter; the ``rnn`` op writes it only when training with
    dropout); restored on exit. Yields the number of layers changed."""
    from paddle.nn.layer.rnn import RNNBase

    changed = []
    for sub in layer.sublayers(include_self=True):
        state = getattr(sub, "_dropout_state", None)
        if isinstance(sub, RNNBase) and state is not None and not state._is_initialized():
            changed.append((sub, state))
            allocated = paddle.zeros([0], dtype="uint8")
            allocated.name = state.name      # "...__non_persistable": the trace keeps it out of the parameters
            sub._dropout_state = allocated
    try:
        yield len(changed)
    finally:
        for sub, state in changed:
            sub._dropout_state = state
