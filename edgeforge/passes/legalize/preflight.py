"""Pre-flight: the ops a target cannot take, each with what to do about it."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .op_fixes import is_pow2, scalar_fill_promotable, upsampling_pool_unfixable
from .program_io import model_files, parse_program
from .rewrites import check_backend, rewrites_for


@dataclass(frozen=True)
class Finding:
    """An op the target cannot take, and what to do about it."""

    op: str
    count: int
    reason: str
    remedy: str  # "rewrite <name> applies" | "keep the layer in float" | "use the onnx backend" | ...


# Quantized-graph ops: the Paddle Lite 2.13 x86 INT8 kernels run but give wrong outputs
# (TOOLCHAIN trap 4).
_QUANT_OPS = frozenset({
    "quantize_linear", "dequantize_linear", "fake_quantize_abs_max",
    "fake_quantize_moving_average_abs_max", "fake_quantize_range_abs_max",
    "fake_quantize_dequantize_moving_average_abs_max", "fake_quantize_dequantize_abs_max",
    "fake_channel_wise_quantize_abs_max", "fake_channel_wise_quantize_dequantize_abs_max",
    "fake_dequantize_max_abs", "fake_channel_wise_dequantize_max_abs",
})


@dataclass(frozen=True)
class _Hazard:
    """An op form known to crash the converter or to give wrong answers on a target, that
    no rewrite here removes."""

    op: str
    backends: frozenset[str]
    valid_targets: frozenset[str] | None
    match: Callable[[Any], bool]
    reason: str
    remedy: str


_HAZARDS: tuple[_Hazard, ...] = (
    _Hazard(
        "pow", frozenset({"lite"}), frozenset({"x86"}), lambda op: op.type == "pow" and not is_pow2(op),
        "Paddle Lite 2.13 x86 pow kernel returns inf for negative bases (it converts, then "
        "computes wrong outputs)",
        "use the onnx backend (or keep the base non-negative)"),
    _Hazard(
        "fill_constant", frozenset({"lite"}), None,
        lambda op: op.type == "fill_constant" and list(op.attr("shape")) == []
        and not scalar_fill_promotable(op),
        "0-D constant (shape []): the model converts but the Paddle Lite runtime aborts "
        '"no valid out_shape. Must set one of shape_tensor, or shape_tensor_list, or shape"',
        "use the onnx backend"),
    _Hazard(
        "quantized ops", frozenset({"lite"}), frozenset({"x86"}), lambda op: op.type in _QUANT_OPS,
        "Paddle Lite 2.13 x86 INT8 kernels run but give wrong outputs (chance-level accuracy)",
        "keep the layer in float"),
    _Hazard(
        "pool2d", frozenset({"onnx"}), None, upsampling_pool_unfixable,
        "adaptive pool whose output is larger than its input by a non-integer factor: paddle2onnx 1.3.1 writes a pool with stride 0 and onnxruntime dies "
        "of SIGFPE (edgeforge refuses the converted model)",
        "use a larger input, or --backend lite"),
)

_CHILD_TIMEOUT_S = 120

_LITE_SUPPORTED_SNIPPET = r"""
import sys
import paddlelite.lite as lite
opt = lite.Opt()
opt.set_valid_places(sys.argv[1])
sys.stdout.flush()
opt.print_supported_ops()
"""

_ONNX_SUPPORTED_SNIPPET = r"""
import os
os.environ.setdefault("FLAGS_enable_pir_api", "0")
from paddle2onnx.paddle2onnx_cpp2py_export import get_all_supported_operators
print("\n".join(get_all_supported_operators()))
"""


_CONVERTED_THROUGH_PIR = frozenset({"scale"})
# ops edgeforge takes out of the graph it hands paddle2onnx (passes/pir_nms.py): the runner runs them
_MOVED_TO_POSTPROCESS = frozenset({"matrix_nms"})


def _run_child(code: str, *args: str, python: str | None = None) -> str | None:
    """Run a snippet in a fresh interpreter: the converters kill their own process on errors."""
    import subprocess
    import sys

    try:
        res = subprocess.run([python or sys.executable, "-c", code, *args], capture_output=True, text=True,
                             timeout=_CHILD_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout if res.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def supported_ops(backend: str, valid_targets: tuple[str, ...] = ()) -> frozenset[str] | None:
    """Op types the frozen converter accepts for ``backend``/``valid_targets``; None when the
    converter is not installed or cannot say."""
    if backend == "lite":
        from ...toolchain import find_lite  # Paddle Lite runs in its own interpreter

        tc = find_lite()
        out = _run_child(_LITE_SUPPORTED_SNIPPET, ",".join(valid_targets), python=tc.python if tc else None)
        if out is None:
            return None
        ops, started = set(), False
        for line in out.splitlines():
            fields = line.split()
            if not fields:
                continue
            if fields[0] == "OP_name":
                started = True
                continue
            if started and re.fullmatch(r"[A-Za-z0-9_]+", fields[0]) and len(fields) > 1:
                ops.add(fields[0])
        return frozenset(ops) or None
    if backend == "onnx":
        out = _run_child(_ONNX_SUPPORTED_SNIPPET)
        ops = frozenset(line.strip() for line in (out or "").splitlines() if line.strip())
        # paddle2onnx 2.x converts a legacy program through PIR (passes/onnx.py), where ops its
        # legacy list no longer names still convert (measured: scale, in vit_tiny's attention)
        return (ops | _CONVERTED_THROUGH_PIR | _MOVED_TO_POSTPROCESS) if ops else None
    return None


def _count_ops(program, pred: Callable[[Any], bool]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for block in program.blocks:
        for op in block.ops:
            if pred(op):
                counts[op.type] = counts.get(op.type, 0) + 1
    return counts


def preflight(model_dir: Path, backend: str, valid_targets: list[str],
              after_legalize: bool = True) -> list[Finding]:
    """List the ops of the model in ``model_dir`` that ``backend``/``valid_targets`` cannot
    take, each with what to do. Reads only model.pdmodel; the converter's supported-op list
    comes from a child process (cached).

    ``after_legalize=True``: judge the model as ``legalize_model`` would leave it (the
    rewrites are applied in memory). ``False``: judge it as it is, and name the rewrite that
    fixes each op it can fix.
    """
    targets = check_backend(backend, valid_targets)
    model_file, _ = model_files(model_dir)
    program = parse_program(model_file)
    findings: list[Finding] = []
    handled: set[str] = set()

    rewrites = rewrites_for(backend, targets)
    if after_legalize:
        for rewrite in rewrites:
            if rewrite.applies(program):
                rewrite.apply(program, None)
    else:
        # each op is credited to the first rewrite that takes it (the order legalize uses)
        per_rewrite: dict[tuple[str, str], int] = {}
        for block in program.blocks:
            for op in block.ops:
                for rewrite in rewrites:
                    if rewrite.match(op):
                        key = (rewrite.name, op.type)
                        per_rewrite[key] = per_rewrite.get(key, 0) + 1
                        break
        by_name = {r.name: r for r in rewrites}
        for (name, op_type), n in per_rewrite.items():
            findings.append(Finding(op_type, n, by_name[name].problem, f"rewrite {name} applies"))
            handled.add(op_type)

    for hazard in _HAZARDS:
        if backend not in hazard.backends:
            continue
        if hazard.valid_targets is not None and not hazard.valid_targets & set(targets):
            continue
        counts = _count_ops(program, hazard.match)
        for op_type, n in counts.items():
            if op_type in handled:
                continue
            findings.append(Finding(op_type, n, hazard.reason, hazard.remedy))
            handled.add(op_type)

    supported = supported_ops(backend, tuple(targets))
    if supported is not None:
        missing = _count_ops(program, lambda op: op.type not in ("feed", "fetch")
                             and op.type not in supported and op.type not in handled)
        onnx = supported_ops("onnx") if backend == "lite" and missing else None
        where = f"valid_targets={','.join(targets)}" if backend == "lite" else "paddle2onnx"
        for op_type, n in sorted(missing.items()):
            if onnx is not None and op_type in onnx:
                remedy = "use the onnx backend"
            elif op_type in _QUANT_OPS:
                remedy = "keep the layer in float"
            else:
                remedy = "replace the layer: no converter here takes this op"
            findings.append(Finding(op_type, n, f"not in the {backend} converter's supported ops ({where})",
                                    remedy))
    return findings
