"""convert.onnx: paddle2onnx to ``model.onnx`` (in a child process), then optional fp16."""
from __future__ import annotations

from pathlib import Path

from ..errors import PassError
from ..native import run_native
from .base import ONNX, PADDLE_FLOAT, Artifact, Pass, PassConfig, PassContext, register


def paddle2onnx_convert(model_dir: str, out_file: str, opset: int) -> int:
    import paddle2onnx

    paddle2onnx.export(f"{model_dir}/model.pdmodel", f"{model_dir}/model.pdiparams", out_file,
                       opset_version=opset, enable_onnx_checker=True, deploy_backend="onnxruntime")
    return 0


class OnnxConfig(PassConfig):
    opset: int = 13


@register
class OnnxConvertPass(Pass):
    name = "convert.onnx"
    version = 1
    consumes = frozenset({PADDLE_FLOAT})
    produces = ONNX
    Config = OnnxConfig

    def target_facts(self, ctx: PassContext):
        return {"backend": "onnx", "opset": self.config.opset}

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        from .legalize import suspects_for

        out = out_dir / "model.onnx"
        ctx.log(f"paddle2onnx opset {self.config.opset}")
        run_native(self.name, "paddle2onnx", paddle2onnx_convert, (str(inp.path), str(out), self.config.opset),
                   out_dir / "paddle2onnx.log", suspects=lambda: suspects_for(inp.path, "onnx", []))
        (out_dir / "paddle2onnx.log").unlink(missing_ok=True)
        if not out.is_file():
            raise PassError(self.name, "paddle2onnx wrote no model.onnx")
        check_converted(self.name, out)
        size = out.stat().st_size
        return {"file": out.name, "precision": "fp32", "float_size_bytes": size,
                **{k: v for k, v in inp.meta.items() if k in ("rewrites", "prune")}}


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
        return dict(inp.meta, precision="fp16")


def check_converted(pass_name: str, path: Path) -> None:
    """Refuse an ONNX model that onnxruntime would crash on, naming the node.

    paddle2onnx 1.3.1 converts ``adaptive_avg_pool2d``/``adaptive_max_pool2d`` whose output is
    larger than its input (vgg16 and alexnet at inputs below 224x224: 1x1 -> 7x7) into a pool with
    stride 0, and onnxruntime then divides by zero (SIGFPE, the whole process dies)."""
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
                f"pool whose output is larger than its input); onnxruntime would divide by zero",
                hint="use an input size at which the feature map reaching the adaptive pool is at least its "
                     "output size (224x224 for vgg16/alexnet), or --backend lite")
