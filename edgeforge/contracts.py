"""Runtime contracts: does an artifact obey what its target's runtime accepts?

A target profile names its execution providers in order and, for each, the QDQ rules it
accepts (``targets.EpRules``). ``check_qdq`` reads an ONNX model and lists every node that breaks
the rules of one provider; verify runs it against the target's first provider and fails the
build on a violation. ``host_cpu_flags`` reads the build host's CPU flags (linux-x86 picks its
INT8 scheme by them). ``host_can_time`` is the one rule for where the host's timing may decide
(the build's INT8 verdict, ``build --precision auto``): only where the host runs the target's
own runtime on the target's ISA.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .runner.device_facts import cpu_flags, int8_cpu_flags
from .targets import TYPE_RANGE, EpRules

@dataclass(frozen=True)
class Violation:
    node: str
    op_type: str
    rule: str
    message: str

    def to_json(self) -> dict:
        return asdict(self)


def host_cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU feature flags of this host (x86 ``flags``, ARM ``Features``), from /proc/cpuinfo."""
    return cpu_flags(cpuinfo)


def int8_flags(flags: frozenset[str]) -> list[str]:
    """The INT8-relevant subset, in a fixed order (what verify records; the runner's fingerprint
    records the same)."""
    return int8_cpu_flags(flags)


_ONNX_INT = {2: "uint8", 3: "int8", 6: "int32", 4: "uint16", 5: "int16", 21: "uint4", 22: "int4"}


def _dtype_name(elem_type: int) -> str:
    return _ONNX_INT.get(elem_type, f"onnx type {elem_type}")


def check_graph(model_path: str | Path, rules: EpRules) -> list[Violation]:
    """The graph against what the provider loads at all: its newest ai.onnx opset
    (``max_opset``) and the op domains it runs (``domains``); empty rules check nothing."""
    import onnx

    if rules.max_opset is None and not rules.domains:
        return []
    model = onnx.load(str(model_path), load_external_data=False)
    out: list[Violation] = []
    imports = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    if rules.max_opset is not None and imports.get("ai.onnx", 0) > rules.max_opset:
        out.append(Violation("(model)", "opset_import", "max_opset",
                             f"ai.onnx opset {imports['ai.onnx']}; this provider loads up to {rules.max_opset}"))
    allowed = {d or "ai.onnx" for d in rules.domains}
    if allowed:
        for node in model.graph.node:
            if (node.domain or "ai.onnx") not in allowed:
                out.append(Violation(node.name or node.output[0], node.op_type, "domains",
                                     f"an op of domain {node.domain}; this provider runs "
                                     f"{', '.join(sorted(allowed))}"))
    return out


def check_qdq(model_path: str | Path, rules: EpRules) -> list[Violation]:
    """Every QuantizeLinear/DequantizeLinear node of ``model_path`` that breaks ``rules``."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(model_path))
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    consts = {n.output[0]: n.attribute[0].t for n in g.node
              if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    out: list[Violation] = []

    def tensor(name):
        t = inits.get(name) or consts.get(name)
        return t

    for node in g.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        name = node.name or node.output[0]

        def bad(rule, message):  # called within this iteration only
            out.append(Violation(name, node.op_type, rule, message))  # noqa: B023

        src = tensor(node.input[0])
        is_weight = src is not None              # a constant (weight or bias), not an activation
        scale = tensor(node.input[1]) if len(node.input) > 1 else None
        zp_name = node.input[2] if len(node.input) > 2 and node.input[2] else None
        zp = tensor(zp_name) if zp_name else None
        if rules.constant_scales and (scale is None or (zp_name and zp is None)):
            bad("constant_scales", "scale or zero point is computed in the graph, not a constant")
        # the integer type: the zero point's, else the weight's, else uint8 (ONNX's default)
        if zp is not None:
            qtype = _dtype_name(zp.data_type)
        elif is_weight:
            qtype = _dtype_name(src.data_type)
        else:
            qtype = "uint8"
        if qtype == "int32":
            if node.op_type == "DequantizeLinear" and not rules.int32_dequantize:
                bad("int32_dequantize", "DequantizeLinear of int32 (a quantized bias); "
                                        "this provider parses only 8-bit DequantizeLinear")
            continue
        allowed = rules.weight_types if is_weight else rules.activation_types
        kind = "weight" if is_weight else "activation"
        if qtype not in allowed:
            bad(f"{kind}_types", f"{kind} type {qtype}; this provider takes {'/'.join(allowed)}")
        if zp is not None and rules.zero_point_zero:
            z = numpy_helper.to_array(zp)
            if np.any(z != 0):
                bad("zero_point_zero", f"zero point {int(z.reshape(-1)[np.argmax(z.reshape(-1) != 0)])}; "
                                       "this provider takes symmetric quantization only (zero point 0)")
        lo, hi = rules.weight_range if is_weight else rules.activation_range
        tlo, thi = TYPE_RANGE.get(qtype, (lo, hi))
        if is_weight and _dtype_name(src.data_type) in TYPE_RANGE:
            w = numpy_helper.to_array(src)
            if w.size and (int(w.min()) < lo or int(w.max()) > hi):
                bad("weight_range", f"weights in [{int(w.min())}, {int(w.max())}], outside [{lo}, {hi}]")
        elif not is_weight and (tlo < lo or thi > hi):
            bad("activation_range", f"{qtype} activations span [{tlo}, {thi}], outside [{lo}, {hi}]")
        if scale is not None:
            s = numpy_helper.to_array(scale)
            if s.size and np.any(~(s > 0)):
                bad("scale", "a scale that is not positive")
            if s.size > 1 and not is_weight and rules.per_tensor_activations:
                bad("per_tensor_activations", f"per-channel activation scale ({s.size} values)")
            if s.size > 1 and is_weight and rules.conv_weight_axis is not None:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
                if any(c.op_type == "Conv" for c in consumers.get(node.output[0], [])) \
                        and axis != rules.conv_weight_axis:
                    bad("conv_weight_axis", f"per-channel Conv weights on axis {axis}, "
                                            f"not {rules.conv_weight_axis}")
    return out


def summary(model_path: str | Path) -> dict:
    """Counts a reader wants next to the verdict: nodes, Q/DQ nodes, zero points, integer types."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(model_path))
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    types: dict[str, int] = {}
    zps: list[int] = []
    q = dq = 0
    for n in g.node:
        if n.op_type == "QuantizeLinear":
            q += 1
        elif n.op_type == "DequantizeLinear":
            dq += 1
        else:
            continue
        zp = inits.get(n.input[2]) if len(n.input) > 2 else None
        if zp is not None:
            t = _dtype_name(zp.data_type)
            types[t] = types.get(t, 0) + 1
            zps.extend(int(v) for v in numpy_helper.to_array(zp).reshape(-1))
    return {"nodes": len(g.node), "quantize_linear": q, "dequantize_linear": dq, "zero_point_types": types,
            "zero_points_nonzero": sum(1 for z in zps if z != 0),
            "zero_point_max_abs": max((abs(z) for z in zps), default=0)}


def describe(v: Violation, provider: str) -> str:
    return f"node {v.node} ({v.op_type}) breaks {provider}'s rule {v.rule}: {v.message}"


def onnx_scheme(target, backend: str = "onnx", flags: frozenset[str] | None = None):
    """The quantization scheme quantize.onnx writes for ``target``: its ``host_cpu_schemes`` entry
    for the first flag this host has (a target that is the build host), else its ``scheme``.
    Returns (scheme, the flag that chose it or None, the host's INT8-relevant flags)."""
    cfg = target.backend_config(backend)
    if flags is None:
        flags = host_cpu_flags() if cfg.host_cpu_schemes else frozenset()
    scheme, flag = cfg.scheme_for(flags)
    return scheme, flag, int8_flags(flags)


HOST_TIMING_EP = "CPUExecutionProvider"     # what quant.speed times on the host
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64",
         "armv7l": "armv7", "armv7": "armv7", "armv8l": "armv7"}


def host_arch(machine: str | None = None) -> str:
    """This host's ISA in a target profile's words (``hardware.arch``): x86_64, arm64, armv7."""
    import platform

    m = (machine if machine is not None else platform.machine()).lower()
    return _ARCH.get(m, m)


def host_can_time(target, backend: str, machine: str | None = None) -> tuple[bool, str]:
    """May the host's timing decide for ``target`` (a TargetProfile) on ``backend``? Only where
    the host runs what the target runs: onnxruntime with the target's first execution provider
    (the host times ``CPUExecutionProvider``) on the target's ISA. Returns (True, "") or (False,
    why, one clause naming the target's runtime: "jetson-orin runs TensorrtExecutionProvider ...").
    Every place that lets a host measurement decide (the quantize pass's timing, the build
    summary's verdict, ``build --precision auto``) asks this. ``backend``: the resolved one
    (``options.resolve_backend``)."""
    cfg = target.backend_config(backend)
    name = target.name
    if not cfg.host_runnable:
        return False, f"the host cannot run {name}'s {backend} artifact"
    if backend != "onnx":
        return False, f"{name} runs Paddle Lite, which the host does not time"
    ep = cfg.execution_providers[0]
    if ep != HOST_TIMING_EP:
        return False, f"{name} runs {ep}, the host times {HOST_TIMING_EP}"
    here = host_arch(machine)
    if target.hardware.arch != here:
        return False, f"{name} is {target.hardware.arch} and this host is {here}"
    return True, ""


def needs_device(target, backend: str, machine: str | None = None) -> str | None:
    """None where the host may decide for ``target``, else the line said instead of a host
    decision (the build summary's verdict, ``build --precision auto``'s reason)."""
    ok, why = host_can_time(target, backend, machine)
    if ok:
        return None
    return (f"the host cannot decide ({why}); the decision needs a device: edgeforge bench, "
            "or edgeforge run --precision auto --device NAME")


def host_arithmetic(target, backend: str, precision: str = "int8",
                    machine: str | None = None) -> dict:
    """``{"kind": HOST_KERNELS | EXACT_QDQ, "why": one sentence}`` for ``target`` (a
    TargetProfile) on ``backend``: how the host (``machine``: ``platform.machine()``)
    evaluates its ``precision`` ONNX artifact."""
    from .quant.arithmetic import EXACT_QDQ, HOST_KERNELS

    if precision != "int8":
        return {"kind": HOST_KERNELS, "why": f"a {precision} artifact has no INT8 kernels"}
    same, why = host_can_time(target, backend, machine)
    if same and machine is None:
        from .quant.arithmetic import kernel_probe

        probe = kernel_probe()
        if not probe["sound"]:
            shapes = ", ".join(f"{cin}->{cout} channels" for cin, cout, _ in probe["wrong"])
            return {"kind": EXACT_QDQ, "host_kernels": "unsound", "probe": probe,
                    "why": f"this host's onnxruntime {probe['onnxruntime']} INT8 CPU kernels miscompute "
                           f"QLinearConv (probe convs {shapes}; onnxruntime#26324, CPUs with AVX512-VNNI "
                           "and AMX): judged by the graph's exact QDQ arithmetic, which a correct kernel "
                           "computes; this host's own CPU provider will not"}
    if same:
        return {"kind": HOST_KERNELS,
                "why": f"{target.name} runs this host's CPUExecutionProvider: its INT8 kernels are the "
                       "target's arithmetic (on x86 without VNNI, int16 saturation included)"}
    return {"kind": EXACT_QDQ,
            "why": f"{why}: the host computes the graph's exact QDQ arithmetic (graph optimizations off), "
                   "not its own CPU's INT8 kernels"}
