"""Per-op profiles of bench results (``bench --profile``): the top ops by time, and for an
INT8/fp32 pair the per-op speed-up and the share of time spent in quantize/dequantize.

A result's ``profile`` (written by the runner): ``by_op`` ([{op, ms, nodes, share}], ms per
run, the sum of each node's median kernel time), ``by_node`` (the slowest nodes), ``total_ms``.
"""
from __future__ import annotations

from ..errors import ConfigError
from .pairing import label

# onnxruntime's quantize/dequantize nodes, and Paddle Lite's precision casts (int8 <-> float)
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "calib", "calib_once")


def profile_of(r: dict, who: str = "result") -> dict:
    """The result's profile, or a ConfigError saying how to get one."""
    prof = r.get("profile")
    if not prof:
        raise ConfigError(f"{who} ({label(r)}) has no per-op profile",
                          hint="bench it with `edgeforge bench BUILD --device D --profile`")
    if prof.get("skipped"):
        raise ConfigError(f"{who} ({label(r)}) has no per-op profile: {prof['skipped']}")
    return prof


def qdq_share(prof: dict) -> float:
    """The share of the profiled time spent in QuantizeLinear/DequantizeLinear nodes."""
    return sum(o["share"] for o in prof["by_op"] if o["op"] in QDQ_OPS)


def top_ops(prof: dict, n: int = 10) -> list[dict]:
    return list(prof["by_op"][:n])


def op_speedups(a: dict, b: dict) -> list[dict]:
    """Per op type of either profile: ms in A and in B and A/B (above 1: faster in B), by
    A's time then B's. An op only one side has (QLinearConv in INT8, Conv in fp32) shows
    with the other side empty."""
    pa = {o["op"]: o for o in a["by_op"]}
    pb = {o["op"]: o for o in b["by_op"]}
    rows = []
    for op in list(pa) + [op for op in pb if op not in pa]:
        ma, mb = (pa.get(op) or {}).get("ms"), (pb.get(op) or {}).get("ms")
        rows.append({"op": op, "ms_a": ma, "ms_b": mb, "speedup": ma / mb if ma and mb else None})
    return rows
