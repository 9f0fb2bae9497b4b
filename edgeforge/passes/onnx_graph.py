"""ONNX graph fixes after paddle2onnx 2.1 (docs/export.md "Program routes"): each one exact
(the same numbers, checked by verify against Paddle), each recorded in the manifest's
``converter_fixes`` with how many nodes it changed.

- ``drop-identity``: paddle2onnx 2.1 writes an ``Identity`` after nearly every op (the
  ``auto.cast.*`` and ``p2o.*`` renames). onnxruntime's symbolic shape inference does not carry
  a constant through an ``Identity``: a ``Reshape`` whose shape comes from ``Constant ->
  Identity`` gets new symbolic dimensions, and a ``Concat`` after it stops the INT8
  pre-processing ("Incomplete symbolic shape inference"; paddle2onnx 1.3.1 wrote no such
  nodes). An ``Identity`` whose output is not a graph output is removed and its readers read
  its input (in subgraphs too).
- ``multiclass-nms-batched``: paddle2onnx's ``multiclass_nms3`` tail assumes batch 1;
  :mod:`.onnx_nms` rewrites it for any batch (``nodes``: the NMS ops rewritten).
- ``nms-to-postprocess``: for a target whose runtime does not run NMS (``[backend.onnx] nms =
  "postprocess"``), the graph ends at the NMS inputs and the record holds the NMS op the
  runner applies on the device (:func:`.onnx_nms.cut_multiclass_nms`).
- ``symbolic-free-dims``: a free dimension declared with a range (``min_shape``...) must stay
  free in the model's inputs; paddle2onnx 2.1 writes ``DynamicDimension.N`` for them (measured),
  and should a converter write a size there instead it becomes ``<input>_dim<i>`` again
  (:func:`symbolic_free_dims`; ``nodes``: the dimensions made free).
"""
from __future__ import annotations


def _subgraphs(node):
    import onnx

    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def _rename_inputs(graph, renames: dict[str, str]) -> None:
    for node in graph.node:
        node.input[:] = [renames.get(name, name) for name in node.input]
        for sub in _subgraphs(node):
            _rename_inputs(sub, renames)


def drop_identities(model) -> int:
    graph = model.graph
    outputs = {o.name for o in graph.output}
    renames: dict[str, str] = {}
    keep = []
    for node in graph.node:
        if node.op_type == "Identity" and len(node.input) == 1 and node.output[0] not in outputs:
            renames[node.output[0]] = renames.get(node.input[0], node.input[0])
            continue
        keep.append(node)
    if not renames:
        return 0
    del graph.node[:]
    graph.node.extend(keep)
    _rename_inputs(graph, renames)
    stale = set(renames)
    kept_info = [v for v in graph.value_info if v.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    return len(renames)


def fix_converted(path, nms_attrs: list[dict] | None = None, nms: str = "graph") -> list[dict]:
    """The fixes, in place on the ONNX file at ``path``; returns what was changed,
    ``[{"rewrite": name, "nodes": n}]``. ``nms_attrs``: the program's ``multiclass_nms3``
    attributes (:func:`.onnx_nms.program_nms_attrs`); ``nms``: the target's ``[backend.onnx]
    nms``: "graph" (NMS in the graph, at any batch) or "postprocess" (the graph ends before
    it: the record's ``postprocess`` is the NMS the runner applies)."""
    import onnx

    from .onnx_nms import batch_multiclass_nms, cut_multiclass_nms

    model = onnx.load(str(path))
    done = []
    cut: dict = {}

    def to_postprocess(m) -> int:
        cut["postprocess"] = cut_multiclass_nms(m, nms_attrs or [])
        return int(cut["postprocess"] is not None)

    fixes = {"drop-identity": drop_identities,
             **({"nms-to-postprocess": to_postprocess} if nms == "postprocess" else
                {"multiclass-nms-batched": lambda m: batch_multiclass_nms(m, nms_attrs or [])})}
    for name, fix in fixes.items():
        n = fix(model)
        if n:
            done.append({"rewrite": name, "nodes": n, **(cut if name == "nms-to-postprocess" else {})})
    if done:
        onnx.save(model, str(path))
    return done


def symbolic_free_dims(path, inputs: list[dict]) -> list[dict]:
    """Make the declared free dimensions (-1 in ``inputs[i]["shape"]`` with a declared range) of
    the ONNX file's inputs symbolic where they hold a size; in place. Returns
    ``[{"rewrite": "symbolic-free-dims", "nodes": n}]`` when it changed any, else ``[]``."""
    import onnx

    want = {s["name"]: [i for i, d in enumerate(s["shape"]) if d == -1] for s in inputs if s.get("min_shape")}
    if not want:
        return []
    model = onnx.load(str(path))
    n = 0
    for inp in model.graph.input:
        dims = inp.type.tensor_type.shape.dim
        for i in want.get(inp.name, []):
            if i < len(dims) and not dims[i].dim_param:
                dims[i].dim_param = f"{inp.name}_dim{i}"        # clears dim_value (a oneof)
                n += 1
    if n:
        onnx.save(model, str(path))
        return [{"rewrite": "symbolic-free-dims", "nodes": n}]
    return []
