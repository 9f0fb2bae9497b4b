"""A few fields of an ONNX model read straight from its protobuf bytes (no ``onnx`` package on a
device): the nodes and the graph's inputs."""
from __future__ import annotations


# ---------------------------------------------------------------- ONNX graph, placement

def _varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf, start, end):
    """(field number, (start, end)) of each length-delimited field of one protobuf message."""
    i = start
    while i < end:
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            _, i = _varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n, i = _varint(buf, i)
            yield key >> 3, (i, i + n)
            i += n
        else:
            raise ValueError("unsupported protobuf wire type %d" % wire)


def onnx_nodes(model_path):
    """[(name, op_type)] of the main graph's nodes, read from the protobuf (no onnx package on the
    device). ModelProto.graph is field 7, GraphProto.node field 1, NodeProto name/op_type 3/4."""
    with open(model_path, "rb") as fh:
        buf = fh.read()
    nodes = []
    for field, (a, b) in _fields(buf, 0, len(buf)):
        if field != 7:
            continue
        for f2, (c, d) in _fields(buf, a, b):
            if f2 != 1:
                continue
            node = {3: "", 4: ""}
            for f3, (e, g) in _fields(buf, c, d):
                if f3 in node:
                    node[f3] = buf[e:g].decode("utf-8", "replace")
            nodes.append((node[3], node[4]))
    return nodes


def onnx_input_names(model_path):
    """The main graph's inputs that are not initializers, read from the protobuf (no onnx package
    on the device): GraphProto.input is field 11, initializer 5; ValueInfoProto/TensorProto names
    are fields 1 and 8. None when the file cannot be parsed (the runtime then says why)."""
    try:
        with open(model_path, "rb") as fh:
            buf = fh.read()
        inputs, inits = [], set()
        for field, (a, b) in _fields(buf, 0, len(buf)):
            if field != 7:
                continue
            for f2, (c, d) in _fields(buf, a, b):
                if f2 in (11, 5):
                    want = 1 if f2 == 11 else 8
                    for f3, (e, g) in _fields(buf, c, d):
                        if f3 == want:
                            name = buf[e:g].decode("utf-8", "replace")
                            (inputs.append(name) if f2 == 11 else inits.add(name))
                            break
        return [n for n in inputs if n not in inits]
    except (OSError, ValueError, IndexError):
        return None
