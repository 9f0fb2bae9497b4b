"""``matrix_nms`` out of the graph for ONNX (docs/export.md "NMS").

ONNX has no Matrix NMS and paddle2onnx 2.1 no converter for ``matrix_nms`` (it aborts on the
PIR route; its legacy op list lacks it). :func:`cut_matrix_nms` ends the PIR program that goes
to paddle2onnx (the converter's copy: verify's float reference keeps the op) at the op's inputs,
``boxes [N, A, 4]`` and ``scores [N, C, A]``, as the first two outputs, and returns the op's
attributes as the ``[postprocess] op = "matrix_nms"`` the runner applies on the device (and
verify on the host): :func:`edgeforge.runner.postprocess.matrix_nms`, Paddle's CPU kernel
in numpy. Outputs that do not depend on the NMS stay, after those two.
"""
from __future__ import annotations

from ..errors import PassError

OP = "1.matrix_nms"
ATTRS = {"score_threshold": float, "post_threshold": float, "nms_top_k": int, "keep_top_k": int,
         "use_gaussian": bool, "gaussian_sigma": float, "background_label": int, "normalized": bool}


def _op_lists(node):
    """Every list of op dicts in a PIR program's JSON (a block's ``ops``), nested ones too."""
    if isinstance(node, dict):
        for value in node.values():
            yield from _op_lists(value)
    elif isinstance(node, list):
        if any(isinstance(v, dict) and isinstance(v.get("#"), str) and "A" in v for v in node):
            yield node
        for value in node:
            yield from _op_lists(value)


def _ids(values) -> list[int]:
    return [v["%"] for v in values or [] if isinstance(v, dict) and isinstance(v.get("%"), int)]


def _attr(op: dict, name: str):
    for a in op.get("A") or []:
        if isinstance(a, dict) and a.get("N") == name:
            return (a.get("AT") or {}).get("D")
    return None


def cut_matrix_nms(program: dict) -> dict | None:
    """End ``program`` (a PIR ``.json`` document, changed in place) at its ``matrix_nms``'s
    inputs; returns the post-processing op (None: no ``matrix_nms``)."""
    found = [(ops, i) for ops in _op_lists(program) for i, op in enumerate(ops) if op.get("#") == OP]
    if not found:
        return None
    if len(found) > 1:
        raise PassError("convert.onnx", f"{len(found)} matrix_nms ops: edgeforge moves one NMS out of an ONNX graph",
                        hint="keep one matrix_nms in the model, or build for Paddle Lite (--backend lite)")
    ops, at = found[0]
    nms = ops[at]
    inputs = _ids(nms.get("I"))
    if len(inputs) < 2:
        raise PassError("convert.onnx", "matrix_nms without its boxes and scores inputs in the PIR program",
                        hint="re-export the model")
    boxes, scores = inputs[:2]
    below = set(_ids(nms.get("O")))
    drop = {at}
    for i in range(at + 1, len(ops)):               # ops that read the NMS, transitively
        if set(_ids(ops[i].get("I"))) & below:
            drop.add(i)
            below.update(_ids(ops[i].get("O")))
    fetches = [op for i, op in enumerate(ops) if op.get("#") == "1.fetch" and i not in drop]
    if not any(op.get("#") == "1.fetch" for i, op in enumerate(ops) if i in drop):
        raise PassError("convert.onnx", "matrix_nms's outputs reach no model output",
                        hint="return matrix_nms's rows and counts from forward")
    types = {o["%"]: o.get("TT") for op in ops for o in op.get("O") or [] if isinstance(o, dict) and "%" in o}
    next_id = max([0, *types]) + 1
    made = []
    for k, (value, name) in enumerate(((boxes, "edgeforge_nms_boxes"), (scores, "edgeforge_nms_scores"))):
        made.append({"#": "1.fetch",
                     "A": [{"AT": {"#": "0.a_str", "D": name}, "N": "name"}, {"AT": {"#": "0.a_i32", "D": k}, "N": "col"}],
                     "I": [{"%": value}], "O": [{"%": next_id + k, "TT": types.get(value)}],
                     "OA": [{"AT": {"#": "0.a_array", "D": [{"#": "0.a_bool", "D": True}]}, "N": "persistable"},
                            {"AT": {"#": "0.a_array", "D": [{"#": "0.a_bool", "D": False}]}, "N": "stop_gradient"}]})
    for k, op in enumerate(fetches, len(made)):     # the outputs that stay, after boxes and scores
        for a in op["A"]:
            if a.get("N") == "col":
                a["AT"]["D"] = k
    kept = [op for i, op in enumerate(ops) if i not in drop]
    ops[:] = [op for op in kept if op.get("#") != "1.fetch"] + made + [op for op in kept if op.get("#") == "1.fetch"]
    post = {"op": "matrix_nms", "boxes": 0, "scores": 1}
    for name, kind in ATTRS.items():
        value = _attr(nms, name)
        if value is not None:
            post[name] = round(float(value), 6) if kind is float else kind(value)
    return post
