"""quantize: INT8 post-training quantization on the project's real calibration data.

Two implementations, chosen by backend:
- quantize.ptq (Paddle Lite path): Paddle's PostTrainingQuantization on the legacy program,
  KL calibration by default, channel-wise weights; the result keeps the float program beside it.
- quantize.onnx (ONNX path): onnxruntime's static QDQ quantizer on the converted float ONNX,
  after its documented pre-processing (TOOLCHAIN trap 8), entropy (KL) calibration by default.
"""
from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from ..cache import sha256_file
from ..errors import PassError
from ..paddle_env import static_mode
from .base import ONNX, PADDLE_FLOAT, PADDLE_INT8, Artifact, Pass, PassConfig, PassContext, register

QUANTIZABLE = ["conv2d", "depthwise_conv2d", "conv2d_transpose", "mul", "matmul", "matmul_v2"]


class QuantConfig(PassConfig):
    algo: Literal["KL", "hist", "mse", "avg", "abs_max"] = "KL"
    calibration_batches: int = Field(10, gt=0)
    batch_size: int = Field(32, gt=0)
    per_channel_weights: bool = True
    keep_float: list[str] = []
    data_digest: str = ""           # sha256 of the calibration file: new data, new cache key


def calibration_batches(ctx: PassContext, cfg: QuantConfig) -> list[dict[str, np.ndarray]]:
    data = ctx.project.load_data("calibration")
    names = [s.name for s in ctx.project.inputs]
    n = len(data[names[0]])
    batches = []
    for b in range(cfg.calibration_batches):
        lo = b * cfg.batch_size
        if lo >= n:
            break
        batches.append({k: data[k][lo:lo + cfg.batch_size] for k in names})
    return batches


def data_digest(ctx: PassContext) -> str:
    return sha256_file(ctx.project.path(ctx.project.spec.data.calibration))


@contextlib.contextmanager
def quiet_stdout():
    """Library chatter (print, logging, tqdm) would tear the progress display; send it away."""
    import io
    import logging

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield sink
    finally:
        root.setLevel(level)


@contextlib.contextmanager
def _fast_kl():
    try:
        from ..quant.kl import fast_kl
    except ImportError:
        yield
        return
    with fast_kl():
        yield


@register
class PaddlePTQPass(Pass):
    name = "quantize.ptq"
    version = 1
    consumes = frozenset({PADDLE_FLOAT})
    produces = PADDLE_INT8
    Config = QuantConfig

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        cfg: QuantConfig = self.config
        batches = calibration_batches(ctx, cfg)
        ctx.log(f"PTQ {cfg.algo} on {sum(len(next(iter(b.values()))) for b in batches)} calibration samples")
        with static_mode() as paddle, _fast_kl(), quiet_stdout():
            from paddle.static.quantization import PostTrainingQuantization

            scope = paddle.static.Scope()
            exe = paddle.static.Executor(paddle.CPUPlace())
            with paddle.static.scope_guard(scope):
                ptq = PostTrainingQuantization(
                    executor=exe, scope=scope, model_dir=str(inp.path),
                    model_filename="model.pdmodel", params_filename="model.pdiparams",
                    data_loader=lambda: iter(batches), batch_nums=len(batches), algo=cfg.algo,
                    quantizable_op_type=QUANTIZABLE, onnx_format=False,
                    weight_quantize_type="channel_wise_abs_max" if cfg.per_channel_weights else "abs_max",
                    skip_tensor_list=list(cfg.keep_float) or None,
                )
                ptq.quantize()
                ptq.save_quantized_model(str(out_dir), model_filename="model.pdmodel",
                                         params_filename="model.pdiparams")
        if not (out_dir / "model.pdmodel").is_file():
            raise PassError(self.name, "PostTrainingQuantization wrote no model")
        shutil.copytree(inp.path, out_dir / "float")
        return {"precision": "int8", "quantization": cfg.model_dump(exclude={"data_digest"}),
                "keep_float": list(cfg.keep_float), **{k: v for k, v in inp.meta.items() if k == "rewrites"}}


_ORT_METHOD = {"KL": "Entropy", "hist": "Percentile", "mse": "Distribution", "avg": "MinMax", "abs_max": "MinMax"}


@register
class OnnxQuantizePass(Pass):
    name = "quantize.onnx"
    version = 1
    consumes = frozenset({ONNX})
    produces = ONNX
    Config = QuantConfig

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                              QuantType, quantize_static)
        from onnxruntime.quantization.shape_inference import quant_pre_process

        cfg: QuantConfig = self.config
        batches = calibration_batches(ctx, cfg)
        pre = out_dir / "pre.onnx"
        with quiet_stdout():
            quant_pre_process(str(inp.path / "model.onnx"), str(pre))

        class Reader(CalibrationDataReader):
            def __init__(self):
                self._it = iter(batches)

            def get_next(self):
                return next(self._it, None)

        ctx.log(f"onnxruntime quantize_static ({_ORT_METHOD[cfg.algo]}) on {len(batches)} batches")
        extra = {"CalibMovingAverage": cfg.algo == "avg"}
        with quiet_stdout():
            quantize_static(str(pre), str(out_dir / "model.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                            per_channel=cfg.per_channel_weights, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8,
                            calibrate_method=getattr(CalibrationMethod, _ORT_METHOD[cfg.algo]),
                            nodes_to_exclude=list(cfg.keep_float) or None, extra_options=extra)
        pre.unlink()
        for stray in out_dir.glob("*.data"):
            stray.unlink()
        return {"file": "model.onnx", "precision": "int8", "float_size_bytes": inp.meta.get("float_size_bytes"),
                "quantization": cfg.model_dump(exclude={"data_digest"}), "keep_float": list(cfg.keep_float),
                **{k: v for k, v in inp.meta.items() if k == "rewrites"}}
