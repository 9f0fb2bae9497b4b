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
- ``upsampling-pool-to-resize``: an adaptive pool whose output is an integer multiple of its
  input (PP-LiteSeg's context module at 64x64: 2x2 -> 4x4; vgg16's 1x1 -> 7x7) becomes an
  ``AveragePool``/``MaxPool`` with strides ``[0, 0]`` (input // output), and onnxruntime refuses
  or divides by zero. Every bin then holds one input pixel, so both poolings are nearest
  replication: a ``Resize`` (nearest, asymmetric, floor) by the factor, bit-identical. The
  legalize rewrite ``upsampling-pool-to-expand`` does this on a legacy program; this fix serves
  the PIR route, whose program legalize does not rewrite (:func:`fix_upsampling_pools`; sizes
  from the program, :func:`.legalize.pir_json.adaptive_pool_sizes`).
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


def fix_upsampling_pools(model, pools: dict[str, tuple[list[int], list[int]]]) -> int:
    """Each pool with a stride <= 0 whose output ``pools`` knows (``(input [H, W], output [H,
    W])``), with the input as its kernel (paddle2onnx's stride-0 form) and the output an integer
    multiple of it, becomes a nearest ``Resize`` by that multiple. Others stay (convert.onnx
    refuses them, naming the node)."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph, n = model.graph, 0
    for i, node in enumerate(list(graph.node)):
        if node.op_type not in ("AveragePool", "MaxPool") or len(node.output) < 1:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        strides, sizes = list(attrs.get("strides") or []), pools.get(node.output[0])
        if not strides or min(strides) > 0 or sizes is None or any(attrs.get(k) for k in ("pads", "dilations")):
            continue
        (h, w), (oh, ow) = sizes
        if list(attrs.get("kernel_shape") or []) != [h, w] or oh % h or ow % w:
            continue
        scales = f"{node.output[0]}.upsample_scales"
        graph.initializer.append(numpy_helper.from_array(np.array([1, 1, oh // h, ow // w], np.float32), scales))
        resize = helper.make_node("Resize", [node.input[0], "", scales], [node.output[0]], name=f"{node.name}.resize",
                                  mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        graph.node.remove(node)
        graph.node.insert(i, resize)
        n += 1
    return n


def fix_converted(path, nms_attrs: list[dict] | None = None, nms: str = "graph",
                  pools: dict | None = None) -> list[dict]:
    """The fixes, in place on the ONNX file at ``path``; returns what was changed,
    ``[{"rewrite": name, "nodes": n}]``. ``nms_attrs``: the program's ``multiclass_nms3``
    attributes (:func:`.onnx_nms.program_nms_attrs`); ``nms``: the target's ``[backend.onnx]
    nms``: "graph" (NMS in the graph, at any batch) or "postprocess" (the graph ends before
    it: the record's ``postprocess`` is the NMS the runner applies). ``pools``: the program's
    adaptive pools (:func:`fix_upsampling_pools`)."""
    import onnx

    from .onnx_nms import batch_multiclass_nms, cut_multiclass_nms

    model = onnx.load(str(path))
    done = []
    cut: dict = {}

    def to_postprocess(m) -> int:
        cut["postprocess"] = cut_multiclass_nms(m, nms_attrs or [])
        return int(cut["postprocess"] is not None)

    fixes = {"drop-identity": drop_identities,
             "upsampling-pool-to-resize": lambda m: fix_upsampling_pools(m, pools or {}),
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
