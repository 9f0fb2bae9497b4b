"""Weights Paddle's PTQ cannot quantize stay in float (issue 45, TOOLCHAIN item 29).

``PostTrainingQuantization`` collects every persistable input of a quantizable op as a weight
and its channel-wise code indexes ``weight.shape[1]`` (matmul-like ops) or ``shape[0]``: a
rank-1 weight (PaddleDetection's ``Integral``, the DFL projection of PicoDet's head,
``F.linear(p, project)`` with ``project [8]``) raises ``IndexError: tuple index out of range``
in ``_calculate_kl_hist_threshold`` and in every ``_sample_*`` method, i.e. with every
calibration. Paddle Lite's INT8 kernels take only a conv's 4-D filter and a matmul's 2-D
weight. :func:`ptq_class` gives a subclass of ``PostTrainingQuantization`` that, once Paddle
has collected its variables, takes such weights out of the collection and marks their ops
``skip_quant`` (as ``skip_tensor_list`` does): those layers run in float, and the build lists
them (:func:`odd_weights` records).
"""
from __future__ import annotations

from ..build_meta import BuildMeta

# the weight rank each quantizable op's INT8 kernel takes
WEIGHT_RANK = {"conv2d": 4, "depthwise_conv2d": 4, "conv2d_transpose": 4, "mul": 2, "matmul": 2, "matmul_v2": 2}


def odd_weights(program) -> list[dict]:
    """The quantizable ops' persistable inputs whose rank is not the one their INT8 kernel
    takes: ``{"layer": weight name, "op", "shape", "reason"}`` per weight."""
    found: dict[str, dict] = {}
    for block in program.blocks:
        for op in block.ops:
            rank = WEIGHT_RANK.get(op.type)
            if rank is None:
                continue
            for name in op.input_arg_names:
                var = block._find_var_recursive(name)
                if var is None or not var.persistable or name in found:
                    continue
                shape = [int(d) for d in var.shape]
                if len(shape) != rank:
                    found[name] = {"layer": name, "op": op.type, "shape": shape,
                                   "reason": f"a rank-{len(shape)} weight; {op.type} INT8 takes rank {rank}"}
    return list(found.values())


def describe(odd: list[dict], shown: int = 4) -> str:
    """The build's line for the layers :func:`odd_weights` kept in float."""
    names = ", ".join(f"{w['layer']} {w['shape']} ({w['op']})" for w in odd[:shown])
    return (f"kept in float: {len(odd)} layer(s) whose weight INT8 kernels cannot take: {names}"
            + (", …" if len(odd) > shown else ""))


def record_odd_weights(meta: BuildMeta, odd: list[dict], log) -> None:
    """``quantization.float_weights`` in the manifest, and the build's line when there are any."""
    meta.quantization.float_weights = list(odd)
    if odd:
        log(describe(odd))


def ptq_class(base, record: list):
    """``base`` (Paddle's ``PostTrainingQuantization``) whose variable collection leaves out the
    weights :func:`odd_weights` finds and keeps their ops in float; ``record`` gets them."""

    class FloatOddWeights(base):
        def _collect_target_varnames(self):
            super()._collect_target_varnames()
            odd = odd_weights(self._program)
            names = {w["layer"] for w in odd}
            for name in names:
                self._quantized_weight_var_name.discard(name)
                self._weight_op_pairs.pop(name, None)
                getattr(self, "_quantized_op_pairs", {}).pop(name, None)
            for block in self._program.blocks:
                for op in block.ops:
                    if op.type in WEIGHT_RANK and names.intersection(op.input_arg_names):
                        op._set_attr("op_namescope", "skip_quant")
            record[:] = odd

    return FloatOddWeights
