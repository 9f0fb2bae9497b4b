"""``multiclass_nms3`` in ONNX at any batch size (docs/export.md "NMS").

paddle2onnx 2.1 maps ``multiclass_nms3`` to ``NonMaxSuppression`` and a tail that assumes
batch 1 (it says so: "the exported ONNX model will only supports inference with input
batch_size == 1"): it reads the selected ``(batch, class, box)`` triples as if the batch index
were 0, takes ``keep_top_k`` over the whole batch, gathers the boxes as ``[N, K, 4]`` and
concatenates them with ``[1, K, 1]`` columns (onnxruntime at batch 2: "Concat: Non concat axis
dimensions must match"), and returns the total row count as one number.

:func:`batch_multiclass_nms` keeps the ``NonMaxSuppression`` node and replaces that tail with
one that computes what Paddle's kernel does, per image: rows ``[M, 6]`` (class, score, x1, y1,
x2, y2), image by image, classes ascending, scores descending within a class; at most
``keep_top_k`` rows per image (the best scores); the background class dropped; ``Index``
``[M, 1]`` = image * A + box (int32); ``NmsRoisNum`` ``[N]`` (int32). Sorting uses ``TopK``,
whose ties keep the lower index first (the ONNX spec), so successive sorts are stable.

:func:`cut_multiclass_nms` is for a target whose runtime does not run NMS (``[backend.onnx]
nms = "postprocess"``: TensorRT's INT8 path): the graph ends at the NMS inputs (boxes
``[N, A, 4]``, scores ``[N, C, A]``) and the NMS, with the op's own attributes, becomes the
``[postprocess] op = "nms"`` the runner applies on the device (and verify on the host).
"""
from __future__ import annotations

from copy import copy

from ..errors import PassError

PASS_NAME = "convert.onnx"


def program_nms_attrs(program: dict) -> list[dict]:
    """The attributes of each ``multiclass_nms3`` of a PIR program's JSON, in program order
    (paddle2onnx converts ops in that order)."""
    from .legalize.pir_json import program_ops

    found = []
    for op in program_ops(program.get("program", program)):
        if op.get("#") == "1.multiclass_nms3" and isinstance(op.get("A"), list):
            found.append({a["N"]: a["AT"].get("D") for a in op["A"] if isinstance(a, dict) and "AT" in a})
    return found


class _Builder:
    def __init__(self, graph, prefix: str, opset: int):
        self.graph, self.prefix, self.opset, self.nodes, self.n = graph, prefix, opset, [], 0

    def name(self, what: str) -> str:
        self.n += 1
        return f"{self.prefix}{what}_{self.n}"

    def op(self, op_type: str, inputs, out: str | None = None, **attrs) -> str:
        from onnx import helper

        out = out or self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=self.name(op_type), **attrs))
        return out

    def const(self, values, dtype="int64") -> str:
        import numpy as np
        from onnx import numpy_helper

        out = self.name("c")
        tensor = numpy_helper.from_array(np.asarray(values, dtype=dtype), out)
        from onnx import helper

        self.nodes.append(helper.make_node("Constant", [], [out], name=self.name("Constant"), value=tensor))
        return out

    def topk(self, x: str, k: str, largest: int) -> str:
        from onnx import helper

        vals, idx = self.name("topk_v"), self.name("topk_i")
        self.nodes.append(helper.make_node("TopK", [x, k], [vals, idx], name=self.name("TopK"),
                                           axis=0, largest=largest, sorted=1))
        return idx

    def reduce_sum0(self, x: str) -> str:
        if self.opset >= 13:
            return self.op("ReduceSum", [x, self.const([0])], keepdims=0)
        return self.op("ReduceSum", [x], axes=[0], keepdims=0)

    def column(self, x: str) -> str:
        return self.op("Reshape", [x, self.const([-1, 1])])

    def length(self, x: str) -> str:
        """``x``'s first dimension as a ``[1]`` int64."""
        return self.op("Slice", [self.op("Shape", [x]), self.const([0]), self.const([1])])


def _tail(nodes: list, at: int) -> tuple[dict[str, str], set[int]]:
    """The outputs of paddle2onnx's tail after the NMS ``nodes[at]`` (``rows``, ``index``,
    ``counts`` -> tensor name) and the indices of the nodes that compute them from it."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for name in n.input:
            readers.setdefault(name, []).append(i)
    below, todo = set(), [at]
    while todo:
        for o in nodes[todo.pop()].output:
            for r in readers.get(o, []):
                if r not in below:
                    below.add(r)
                    todo.append(r)

    def made_by(name, op_type):
        p = producer.get(name)
        return p is not None and p in below and nodes[p].op_type == op_type

    outs = {}
    for i in sorted(below):
        n = nodes[i]
        if n.op_type == "Squeeze" and made_by(n.input[0], "Concat"):
            outs.setdefault("rows", n.output[0])
    if "rows" not in outs:
        raise PassError(PASS_NAME, "multiclass_nms3: paddle2onnx's NonMaxSuppression tail is not the one "
                        "edgeforge rewrites for batches (paddle2onnx version?)",
                        hint="run the detector at batch 1, or keep NMS out of the graph ([postprocess])")
    for i in sorted(below):
        n = nodes[i]
        if n.op_type == "Cast" and made_by(n.input[0], "Slice"):
            sl = nodes[producer[n.input[0]]]
            if made_by(sl.input[0], "Shape") and nodes[producer[sl.input[0]]].input[0] == outs["rows"]:
                outs.setdefault("counts", n.output[0])
        elif n.op_type == "Cast" and made_by(n.input[0], "Reshape") and "index" not in outs:
            outs["index"] = n.output[0]
    # the tail: nodes below the NMS that the three outputs depend on
    tail, todo = set(), [producer[t] for t in outs.values()]
    while todo:
        i = todo.pop()
        if i in tail or i not in below:
            continue
        tail.add(i)
        todo.extend(producer[name] for name in nodes[i].input if name in producer)
    return outs, tail


def _rebuild(b: _Builder, nms, attrs: dict, outs: dict[str, str]) -> None:
    boxes, scores, sel = nms.input[0], nms.input[1], nms.output[0]
    col = [b.op("Gather", [sel, b.const(i, "int64")], axis=1) for i in range(3)]     # [K] each
    img, cls, box_i = col
    score = b.op("GatherND", [scores, sel])                                              # [K]
    box = b.op("GatherND", [boxes, b.op("Concat", [b.column(img), b.column(box_i)], axis=1)])   # [K, 4]
    cols = {"img": img, "cls": cls, "box_i": box_i, "score": score, "box": box}

    def keep(mask):
        for k, v in cols.items():
            cols[k] = b.op("Compress", [v, mask], axis=0)

    def reorder(idx):
        for k, v in cols.items():
            cols[k] = b.op("Gather", [v, idx], axis=0)

    def stable_sort(key: str, largest: int):
        x = cols[key] if key == "score" else b.op("Cast", [cols[key]], to=1)
        reorder(b.topk(x, b.length(x), largest))

    background = int(attrs.get("background_label", -1))
    if background >= 0:
        keep(b.op("Not", [b.op("Equal", [cols["cls"], b.const(background)])]))
    stable_sort("score", 1)
    stable_sort("img", 0)                                         # images ascending, best first
    n_img = b.length(scores)
    images = b.op("Range", [b.const(0), b.op("Squeeze", [n_img], axes=[0]) if b.opset < 13
                            else b.op("Squeeze", [n_img, b.const([0])]), b.const(1)])
    onehot = b.op("Cast", [b.op("Equal", [b.column(cols["img"]), b.op("Reshape", [images, b.const([1, -1])])])], to=7)
    counts = b.reduce_sum0(onehot)                                # [N]
    keep_top_k = int(attrs.get("keep_top_k", -1))
    if keep_top_k > -1:
        start = b.op("CumSum", [counts, b.const(0)], exclusive=1)
        k_all = b.op("Squeeze", [b.length(cols["img"]), b.const([0])]) if b.opset >= 13 else \
            b.op("Squeeze", [b.length(cols["img"])], axes=[0])
        rank = b.op("Sub", [b.op("Range", [b.const(0), k_all, b.const(1)]),
                            b.op("Gather", [start, cols["img"]], axis=0)])
        keep(b.op("Less", [rank, b.const(keep_top_k)]))
        counts = b.op("Min", [counts, b.const([keep_top_k])])
    stable_sort("cls", 0)
    stable_sort("img", 0)                                         # image, class, score descending
    cls_f = b.column(b.op("Cast", [cols["cls"]], to=1))
    rows = b.op("Concat", [cls_f, b.column(cols["score"]), cols["box"]], axis=1, out=outs["rows"])
    del rows
    if "counts" in outs:
        b.op("Cast", [counts], to=6, out=outs["counts"])
    if "index" in outs:
        a = b.op("Gather", [b.op("Shape", [scores]), b.const(2)], axis=0)
        flat = b.op("Add", [b.op("Mul", [cols["img"], a]), cols["box_i"]])
        b.op("Cast", [b.column(flat)], to=6, out=outs["index"])


def batch_multiclass_nms(model, nms_attrs: list[dict]) -> int:
    """Rewrite each paddle2onnx ``multiclass_nms3`` tail of ``model`` (in place) for any batch;
    ``nms_attrs``: :func:`program_nms_attrs`. Returns the number rewritten."""
    graph = model.graph
    found = [n for n in graph.node if n.op_type == "NonMaxSuppression"]
    if not found or not nms_attrs:
        return 0
    if len(found) != len(nms_attrs):
        raise PassError(PASS_NAME, f"{len(found)} NonMaxSuppression nodes for {len(nms_attrs)} multiclass_nms3 ops",
                        hint="run the detector at batch 1, or keep NMS out of the graph ([postprocess])")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset < 11:
        return 0
    for k, attrs in enumerate(nms_attrs):
        nodes = [copy(n) for n in graph.node]        # (protobuf wrappers have no stable id)
        at = [i for i, n in enumerate(nodes) if n.op_type == "NonMaxSuppression"][k]
        outs, tail = _tail(nodes, at)
        builder = _Builder(graph, f"edgeforge.nms{k}.", opset)
        _rebuild(builder, nodes[at], attrs, outs)
        new = [n for i, n in enumerate(nodes[:at + 1]) if i not in tail] + builder.nodes + \
            [n for i, n in enumerate(nodes[at + 1:], at + 1) if i not in tail]
        del graph.node[:]
        graph.node.extend(new)
    _drop_dead_constants(graph)
    return len(found)


def _drop_dead_constants(graph) -> None:
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    kept = [n for n in graph.node if not (n.op_type == "Constant" and n.output[0] not in used)]
    del graph.node[:]
    graph.node.extend(kept)


def cut_multiclass_nms(model, nms_attrs: list[dict]) -> dict | None:
    """End ``model``'s graph (in place) at its one ``NonMaxSuppression``'s inputs; returns the
    ``[postprocess]`` op that does the NMS outside (None: no NMS in the graph)."""
    import onnx

    graph = model.graph
    found = [n for n in graph.node if n.op_type == "NonMaxSuppression"]
    if not found:
        return None
    if len(found) != 1 or len(nms_attrs) != 1:
        raise PassError(PASS_NAME, f"{len(found)} NonMaxSuppression nodes for {len(nms_attrs)} multiclass_nms3 ops: "
                        "edgeforge moves one NMS out of the graph",
                        hint="keep one multiclass_nms3 in the model, or build for a target that runs NMS")
    nms, attrs = found[0], nms_attrs[0]
    boxes, scores = nms.input[0], nms.input[1]
    producer = {o: n for n in graph.node for o in n.output}
    below = {id(nms)}
    changed = True
    while changed:                                   # the nodes that read the NMS, transitively
        changed = False
        for n in graph.node:
            if id(n) not in below and any(id(producer[i]) in below for i in n.input if i in producer):
                below.add(id(n))
                changed = True
    made_below = {o for n in graph.node if id(n) in below for o in n.output}
    info = {v.name: v for v in (*graph.value_info, *graph.output)}
    kept_outputs = [o for o in graph.output if o.name not in made_below]
    new_outputs = [info.get(t) or onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None)
                   for t in (boxes, scores)]
    del graph.output[:]
    graph.output.extend(new_outputs + kept_outputs)
    need, todo = set(), [o.name for o in graph.output]
    while todo:                                      # the nodes the new outputs depend on
        p = producer.get(todo.pop())
        if p is not None and id(p) not in need:
            need.add(id(p))
            todo.extend(p.input)
    kept = [n for n in graph.node if id(n) in need]
    del graph.node[:]
    graph.node.extend(kept)
    used = {i for n in graph.node for i in n.input}
    inits = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    post = {"op": "nms", "boxes": 0, "scores": 1,
            "score_threshold": round(float(attrs.get("score_threshold", 0.05)), 6),     # (f32 in the program)
            "iou_threshold": round(float(attrs.get("nms_threshold", 0.5)), 6),
            "keep_top_k": int(attrs.get("keep_top_k", 100)), "nms_top_k": int(attrs.get("nms_top_k", -1)),
            "normalized": bool(attrs.get("normalized", True)),
            "background_label": int(attrs.get("background_label", -1)), "nms_eta": round(float(attrs.get("nms_eta", 1.0)), 6)}
    return post
