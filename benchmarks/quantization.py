#!/usr/bin/env python3
"""INT8 side by side: edgeforge vs PaddleSlim quant_post_static (KL) vs onnxruntime quantize_static
(Entropy), measured in one run on the same calibration and evaluation data.

Models: the digits example (real sklearn digits) and MobileNetV2 from paddle.vision (random
weights, calibrated on 32 crops of sklearn's sample photos, evaluated on 64 other crops).
Columns: calibration time, artifact size, p50 latency (onnxruntime, batch 1, 2 threads, this host),
top-1 agreement and cosine against the float model.

    python benchmarks/quantization.py [--models digits,mobilenet_v2] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["FLAGS_enable_pir_api"] = "0"

import numpy as np

from common import agreement, onnx_outputs, p50_ms, vision_project

REPO = Path(__file__).resolve().parents[1]


def step_seconds(manifest: dict, name: str) -> float:
    return sum(s["seconds"] for s in manifest["steps"] if s["pass"] == name)


def digits_project() -> Path:
    root = REPO / "examples" / "digits"
    if not (root / "digits.pdparams").is_file():
        subprocess.run([sys.executable, str(root / "train.py")], check=True)
    return root


def paddleslim_kl(float_dir: Path, batches: list[dict], out: Path) -> tuple[float, Path]:
    """PaddleSlim quant_post_static, default KL, QDQ format; then paddle2onnx (what users do today)."""
    import paddle
    import paddle2onnx
    from paddleslim.quant import quant_post_static

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    t0 = time.perf_counter()
    quant_post_static(executor=exe, model_dir=str(float_dir), quantize_model_path=str(out / "slim"),
                      data_loader=lambda: iter(batches), model_filename="model.pdmodel",
                      params_filename="model.pdiparams", batch_nums=len(batches), algo="KL",
                      onnx_format=True, save_model_filename="model.pdmodel", save_params_filename="model.pdiparams")
    seconds = time.perf_counter() - t0
    paddle.disable_static()
    onnx_path = out / "slim.onnx"
    paddle2onnx.export(str(out / "slim/model.pdmodel"), str(out / "slim/model.pdiparams"), str(onnx_path),
                       opset_version=13, enable_onnx_checker=True, deploy_backend="onnxruntime")
    return seconds, onnx_path


def ort_entropy(float_onnx: Path, batches: list[dict], out: Path) -> tuple[float, Path]:
    """onnxruntime quantize_static with its documented pre-processing, QDQ, per-channel, Entropy."""
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    t0 = time.perf_counter()
    pre = out / "ort-pre.onnx"
    quant_pre_process(str(float_onnx), str(pre))
    q = out / "ort-entropy.onnx"
    quantize_static(str(pre), str(q), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.Entropy)
    return time.perf_counter() - t0, q


def bench_model(name: str, project: Path, work: Path, batch_size: int, batches: int) -> list[dict]:
    from edgeforge import api
    from edgeforge.cache import Cache
    from edgeforge.project import load_project

    cache = work / "cache"
    proj = load_project(project)
    with np.load(project / proj.spec.data.evaluation) as z:
        feeds = {"x": z["x"]}
    with np.load(project / proj.spec.data.calibration) as z:
        cal = z["x"][: batch_size * batches]
    cal_batches = [{"x": cal[i:i + batch_size]} for i in range(0, len(cal), batch_size)]
    # edgeforge reads the same calibration file (all of it fits the targets' 10 x 32 batches)

    kw = dict(cache_dir=cache, float_fallback=False)
    fp32 = api.build(project, "linux-x86", precision="fp32", out=work / f"{name}-fp32", **kw)
    float_onnx = fp32.out_dir / "model.onnx"
    ref = onnx_outputs(float_onnx, feeds)
    rows = []

    def row(method, seconds, path, p50=True, size=None):
        out = onnx_outputs(path, feeds) if p50 else None
        top1, cos = agreement(out, ref) if out is not None else (None, None)
        rows.append({"model": name, "method": method, "calib_s": seconds,
                     "size_mb": (size if size is not None else path.stat().st_size) / 1e6,
                     "p50_ms": p50_ms(path, feeds) if p50 else None, "top1": top1, "cosine": cos})

    rows.append({"model": name, "method": "float (fp32 ONNX)", "calib_s": None,
                 "size_mb": float_onnx.stat().st_size / 1e6, "p50_ms": p50_ms(float_onnx, feeds),
                 "top1": 1.0, "cosine": 1.0})
    ef = api.build(project, "linux-x86", out=work / f"{name}-int8", **kw)
    row("edgeforge ONNX INT8 (KL)", step_seconds(ef.manifest, "quantize.onnx"), ef.out_dir / "model.onnx")
    s, p = ort_entropy(float_onnx, cal_batches, work)
    row("onnxruntime quantize_static (Entropy)", s, p)
    # The Paddle Lite path: PTQ KL (edgeforge's vectorised search) against abs_max, same run.
    for algo in ("KL", "abs_max"):
        b = api.build(project, "rpi4", out=work / f"{name}-rpi4-{algo}", algo=algo, **kw)
        rows.append({"model": name, "method": f"edgeforge Paddle PTQ {algo} (Lite .nb, arm)",
                     "calib_s": step_seconds(b.manifest, "quantize.ptq"),
                     "size_mb": b.manifest["artifact"]["size_bytes"] / 1e6, "p50_ms": None, "top1": None,
                     "cosine": None})
    export_dir = next(Path(Cache(cache).entry(s_["cache_key"])) / "artifact"
                      for s_ in fp32.manifest["steps"] if s_["pass"] == "legalize")
    s, p = paddleslim_kl(export_dir, cal_batches, work)
    row("PaddleSlim quant_post_static (KL) + paddle2onnx", s, p)
    return rows


def print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"INT8 quantization, one run on {platform.processor() or platform.machine()} "
                    f"({os.cpu_count()} cores), onnxruntime p50 at batch 1, 2 threads")
    for col in ("model", "method", "calib s", "size MB", "p50 ms", "top-1 agree", "cosine"):
        t.add_column(col, justify="left" if col in ("model", "method") else "right")
    f = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for r in rows:
        t.add_row(r["model"], r["method"], f(r["calib_s"], ".1f"), f(r["size_mb"], ".2f"), f(r["p50_ms"], ".2f"),
                  f(r["top1"], ".3f"), f(r["cosine"], ".4f"))
    Console(width=160).print(t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="digits,mobilenet_v2")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ef-bench-") as tmp:
        work = Path(tmp)
        for name in args.models.split(","):
            if name == "digits":
                rows += bench_model("digits", digits_project(), work / "digits", batch_size=32, batches=10)
            else:
                proj = vision_project(work / f"{name}-project", name, calib=32, evaluation=64)
                rows += bench_model(name, proj, work / name, batch_size=8, batches=4)
            print_table(rows)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
