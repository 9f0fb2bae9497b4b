"""convert.onnx: paddle2onnx to ``model.onnx`` (in a child process), then optional fp16."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from ..build_meta import BuildMeta, Nms
from ..errors import PassError
from ..native import last_lines, run_native
from .base import ONNX, PADDLE_FLOAT, Artifact, Pass, PassConfig, PassContext, register


def paddle2onnx_convert(model_dir: str, out_file: str, opset: int, nms: str = "graph") -> list[dict]:
    """paddle2onnx >= 2 on the PIR program: ``model.json``, or ``model.pdmodel`` translated to
    PIR here as paddle2onnx itself would (``paddle.pir.translate_to_pir``), so that both routes
    get the fixes of :mod:`.legalize.pir_json`, then those of :mod:`.onnx_graph` on the ONNX file
    (returned: what they all changed). No polygraphy
    folding: its ``POLYGRAPHY_AUTOINSTALL_DEPS=1`` would pip-install packages at build time.
    paddle2onnx 2.1 logs a failed conversion and returns; no model.onnx is the caller's error."""
    import json
    import tempfile

    from ..paddle_env import PIR_FILE, import_paddle, is_pir
    from .legalize.pir_json import adaptive_pool_sizes, for_paddle2onnx
    from .onnx_graph import fix_converted
    from .onnx_nms import program_nms_attrs
    from .pir_nms import cut_matrix_nms

    paddle = import_paddle()
    import paddle2onnx
    from paddle2onnx.utils import logging as p2o_logging

    def failed(message="", use_color=True, exit=True):     # its logging.error ends the process
        lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
        raise RuntimeError(" ".join(lines[:2])[:300] or "paddle2onnx stopped")

    p2o_logging.error = staticmethod(failed)
    with tempfile.TemporaryDirectory(prefix="edgeforge-p2o-") as tmp:
        src, params = Path(model_dir) / PIR_FILE, Path(model_dir) / "model.pdiparams"
        if not is_pir(model_dir):
            src, params = _legacy_to_pir(paddle, paddle2onnx, Path(model_dir), Path(tmp) / "pir" / "model")
        fixed = Path(tmp) / "model.json"
        rewrites = for_paddle2onnx(src, fixed)
        program = json.loads(fixed.read_text())
        matrix = cut_matrix_nms(program)     # ONNX has no Matrix NMS: the runner does it
        if matrix is not None:
            fixed.write_text(json.dumps(program, separators=(",", ":")))
            rewrites.append({"rewrite": "nms-to-postprocess", "ops": 1, "postprocess": matrix})
        nms_attrs, pools = program_nms_attrs(program), adaptive_pool_sizes(program)
        paddle2onnx.export(str(fixed), str(params), out_file, opset_version=opset, enable_onnx_checker=True,
                           deploy_backend="onnxruntime", optimize_tool="none")
    if Path(out_file).is_file():
        rewrites += fix_converted(out_file, nms_attrs, nms, pools)
    return rewrites


def _legacy_to_pir(paddle, paddle2onnx, model_dir: Path, prefix: Path) -> tuple[Path, Path]:
    """The legacy program and its parameters as a PIR program at ``prefix`` (paddle2onnx
    2.1's own translation, written out)."""
    from paddle.pir_utils import OldIrGuard

    from ..paddle_env import static_mode

    with static_mode():          # dygraph again afterwards (callers in the same process: tests)
        exe = paddle.static.Executor(paddle.CPUPlace())
        with OldIrGuard():
            program, _, _ = paddle.static.load_inference_model(str(model_dir / "model"), exe)
        translated = paddle.pir.translate_to_pir(program.desc)
        paddle2onnx.load_parameter(translated)
        paddle2onnx.save_program(translated, str(prefix))
    return prefix.with_suffix(".json"), prefix.with_suffix(".pdiparams")


def program_kind(model_dir: Path) -> str:
    from ..paddle_env import is_pir

    return "PIR" if is_pir(model_dir) else "legacy"


class OnnxConfig(PassConfig):
    opset: int = 13
    nms: Literal["graph", "postprocess"] = "graph"      # the target's [backend.onnx] nms


@register
class OnnxConvertPass(Pass):
    name = "convert.onnx"
    version = 6
    consumes = frozenset({PADDLE_FLOAT})
    produces = ONNX
    Config = OnnxConfig

    def target_facts(self, ctx: PassContext):
        return {"backend": "onnx", "opset": self.config.opset, "nms": self.config.nms}

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        from .legalize import suspects_for

        out = out_dir / "model.onnx"
        ctx.log(f"paddle2onnx opset {self.config.opset}")
        fixes = run_native(self.name, "paddle2onnx", paddle2onnx_convert,
                           (str(inp.path), str(out), self.config.opset, self.config.nms),
                   out_dir / "paddle2onnx.log", suspects=lambda: suspects_for(inp.path, "onnx", []))
        if not out.is_file():
            log = (out_dir / "paddle2onnx.log").read_text(errors="replace")
            errors = [ln for ln in log.splitlines() if "[ERROR]" in ln or "Error" in ln]
            raise PassError(self.name, f"paddle2onnx wrote no model.onnx from the {program_kind(inp.path)} program"
                            + (f": {last_lines(chr(10).join(errors), 2)}" if errors else ""),
                            hint="express the op named with ops paddle2onnx converts, or --backend lite")
        (out_dir / "paddle2onnx.log").unlink(missing_ok=True)
        from .onnx_graph import symbolic_free_dims

        fixes = fixes + symbolic_free_dims(out, [s.model_dump() for s in ctx.project.inputs])
        check_converted(self.name, out)
        size = out.stat().st_size
        if fixes:
            ctx.log("paddle2onnx fixes: " + ", ".join(
                f"{f['rewrite']} ({f.get('ops', f.get('nodes'))} {'ops' if 'ops' in f else 'nodes'})" for f in fixes))
        cut = next((f["postprocess"] for f in fixes if f["rewrite"] == "nms-to-postprocess"), None)
        if cut is not None:
            why = ("ONNX has no matrix_nms" if cut["op"] == "matrix_nms"
                   else f"{ctx.target.name}'s [backend.onnx] nms = \"postprocess\"")
            ctx.log(f"NMS moved out of the graph: the runner does it on the device ({why})")
        meta = BuildMeta(file=out.name, precision="fp32", float_size_bytes=size, converter_fixes=fixes,
                         program=program_kind(inp.path)).carry(inp.meta, "rewrites", "prune")
        if cut is not None:
            meta.nms = Nms(where="postprocess", postprocess=cut)
        return meta


class Fp16Config(PassConfig):
    keep_io_types: bool = True


@register
class OnnxFp16Pass(Pass):
    name = "fp16.onnx"
    version = 1
    consumes = frozenset({ONNX})
    produces = ONNX
    Config = Fp16Config

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = onnx.load(str(inp.path / "model.onnx"))
        half = convert_float_to_float16(model, keep_io_types=self.config.keep_io_types)
        onnx.save(half, str(out_dir / "model.onnx"))
        return inp.meta.updated(precision="fp16")


def check_converted(pass_name: str, path: Path) -> None:
    """Refuse an ONNX model that onnxruntime would crash on, naming the node.

    paddle2onnx (1.3.1 and 2.1) converts ``adaptive_avg_pool2d``/``adaptive_max_pool2d`` whose
    output is larger than its input (vgg16 and alexnet at inputs below 224x224: 1x1 -> 7x7) into a
    pool with stride 0, and onnxruntime then divides by zero (SIGFPE, the whole process dies).
    An integer factor is rewritten before this (``upsampling-pool-to-resize``, both routes);
    what is left here upsamples by a non-integer factor (2x2 -> 3x3)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for node in model.graph.node:
        if node.op_type not in ("AveragePool", "MaxPool", "LpPool"):
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        strides = list(attrs.get("strides") or [])
        if strides and min(strides) <= 0:
            raise PassError(
                pass_name,
                f"paddle2onnx wrote {node.op_type} '{node.name}' with strides {strides} (from an adaptive "
                f"pool whose output is larger than its input, by a non-integer factor); onnxruntime "
                f"would divide by zero",
                hint="use an input size at which the feature map reaching the adaptive pool is at least its "
                     "output size or divides it (224x224 for vgg16/alexnet), or --backend lite")
