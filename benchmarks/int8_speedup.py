#!/usr/bin/env python3
"""Is INT8 faster than fp32 here? fp32, edgeforge INT8 and onnxruntime quantize_static, timed
interleaved in one process (onnxruntime spinning off, batch 1, 2 threads), with the verdict
edgeforge would print for each INT8 row.

Models: the digits example (trained on sklearn's digits, labelled evaluation set), MobileNetV2
and ResNet18 from paddle.vision (random He-normal weights with BatchNorm statistics from real
crops; calibrated on 32 crops of sklearn's sample photos, evaluated on 64 other crops).
edgeforge INT8 is the default linux-x86 build (accuracy budget on); when the budget keeps
layers in float, plain KL INT8 (--no-fallback, like for like) is timed in the same run; quantize_static is
onnxruntime's own (quant_pre_process, QDQ, per-channel, u8 activations, s8 weights, MinMax) on
edgeforge's float ONNX with the same calibration samples.

    python benchmarks/int8_speedup.py [--models digits,mobilenet_v2,resnet18] [--runs 200] [--json F]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["FLAGS_enable_pir_api"] = "0"

import numpy as np

from common import agreement, onnx_outputs, vision_project

REPO = Path(__file__).resolve().parents[1]
THREADS = 2
PLAIN = "edgeforge INT8 (--no-fallback)"


def digits_project(work: Path) -> Path:
    root = work / "digits-project"
    shutil.copytree(REPO / "examples" / "digits", root, ignore=shutil.ignore_patterns("data", "*.pdparams"))
    subprocess.run([sys.executable, str(root / "train.py"), "--out", str(root)], check=True,
                   stdout=subprocess.DEVNULL)
    return root


def ort_quantize_static(float_onnx: Path, batches: list[dict], out: Path) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    pre = out / "ort-pre.onnx"
    quant_pre_process(str(float_onnx), str(pre))
    q = out / "ort-int8.onnx"
    quantize_static(str(pre), str(q), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return q


def bench_model(name: str, project: Path, work: Path, runs: int, batch_size: int, budget: bool = True) -> list[dict]:
    from edgeforge import api
    from edgeforge.project import load_project
    from edgeforge.quant.speed import interleaved, p50
    from edgeforge.report.compare import compare_samples
    from edgeforge.report.verdict import int8_verdict

    work.mkdir(parents=True, exist_ok=True)
    proj = load_project(project)
    ev = proj.load_data("evaluation")
    feeds, labels = {"x": ev["x"]}, ev.get("labels")
    cal = proj.load_data("calibration")["x"]
    batches = [{"x": cal[i:i + batch_size]} for i in range(0, min(len(cal), 320), batch_size)]
    kw = {"cache_dir": work / "cache"}
    fp32 = api.build(project, "linux-x86", precision="fp32", out=work / f"{name}-fp32", **kw)
    # budget=False: plain KL INT8, no layer kept in float (--no-fallback), like for like with quantize_static
    ef = api.build(project, "linux-x86", out=work / f"{name}-int8", float_fallback=budget, **kw)
    builds = {"edgeforge INT8": ef}
    models = {"fp32": fp32.out_dir / "model.onnx", "edgeforge INT8": ef.out_dir / "model.onnx"}
    if budget and ef.manifest.get("keep_float"):
        # the budget kept layers in float: time plain KL too, in the same run, like for like
        plain = api.build(project, "linux-x86", out=work / f"{name}-int8-plain", float_fallback=False,
                          **kw)
        builds[PLAIN] = plain
        models[PLAIN] = plain.out_dir / "model.onnx"
    models["quantize_static"] = ort_quantize_static(fp32.out_dir / "model.onnx", batches, work)
    samples = interleaved(models, feeds, runs=runs, warmups=20, threads=THREADS)
    ref = onnx_outputs(models["fp32"], feeds)
    rows = []
    for method, path in models.items():
        out = onnx_outputs(path, feeds)
        top1, cos = agreement(out, ref)
        drop = None if labels is None else float((np.mean(ref.argmax(1) == labels) - np.mean(out.argmax(1) == labels)) * 100)
        row = {"model": name, "method": method, "size_mb": path.stat().st_size / 1e6,
               "p50_ms": p50(samples[method]), "speedup": p50(samples["fp32"]) / p50(samples[method]),
               "top1": top1, "cosine": cos, "accuracy_drop": drop, "verdict": "-"}
        if method != "fp32":
            c = compare_samples(samples["fp32"], samples[method], labels=("fp32", method))
            row["vs_static"] = p50(samples["quantize_static"]) / p50(samples[method])
            # is this row's INT8 faster or slower than quantize_static's, or within noise?
            row["vs_static_compare"] = compare_samples(samples["quantize_static"], samples[method]).verdict
            # the target's budget: 1 point with labels, else cosine 0.99 (here: the mean cosine)
            b = builds.get(method)
            within = (b.manifest["verify"]["status"] == "passed" if b is not None
                      else (drop <= 1.0 if drop is not None else cos >= 0.99))
            row["verdict"] = int8_verdict(c, accuracy_drop=drop, cosine=None if labels is not None else cos,
                                          within_budget=within, where="on this host").line
            if b is not None:
                row["kept_in_float"] = len(b.manifest.get("keep_float") or [])
                row["budget"] = "met" if b.manifest["verify"]["status"] == "passed" else "missed"
                if not budget:
                    row["method"] = PLAIN
        rows.append(row)
    return rows


def cpu_flags() -> str:
    from edgeforge.contracts import host_cpu_flags, int8_flags

    return ", ".join(int8_flags(host_cpu_flags())) or "none of avx2/avx512/vnni"


def print_table(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"INT8 vs fp32, interleaved in one process, onnxruntime spinning off, batch 1, "
                    f"{THREADS} threads; host CPU flags: {cpu_flags()}", title_justify="left")
    for col in ("model", "method", "size MB", "p50 ms", "vs fp32", "vs static", "top-1", "cosine", "verdict"):
        t.add_column(col, justify="left" if col in ("model", "method", "verdict") else "right")
    f = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for r in rows:
        t.add_row(r["model"], r["method"] + (f" ({r['kept_in_float']} float)" if r.get("kept_in_float") else ""),
                  f(r["size_mb"], ".2f"), f(r["p50_ms"], ".2f"), f(r["speedup"], ".2f") + "x",
                  f(r.get("vs_static"), ".2f") + {"faster": " (faster)", "slower": " (slower)", "not significant": " (n.s.)"}
                  .get(r.get("vs_static_compare") if r["method"] != "quantize_static" else None, ""),
                  f(r["top1"], ".3f"), f(r["cosine"], ".4f"), r["verdict"])
    Console(width=200).print(t)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="digits,mobilenet_v2,resnet18")
    ap.add_argument("--runs", type=int, default=200, help="interleaved rounds (default 200)")
    ap.add_argument("--no-fallback", action="store_true",
                    help="edgeforge INT8 without the accuracy budget's float layers (plain KL)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    budget = not args.no_fallback
    with tempfile.TemporaryDirectory(prefix="ef-int8-") as tmp:
        work = Path(tmp)
        for name in args.models.split(","):
            if name == "digits":
                rows += bench_model("digits", digits_project(work), work / "digits", args.runs, 32, budget)
            else:
                proj = vision_project(work / f"{name}-project", name, calib=32, evaluation=64, init="calibrated")
                rows += bench_model(name, proj, work / name, args.runs, 8, budget)
            print_table(rows)
            if args.json:
                args.json.write_text(json.dumps({"cpu_flags": cpu_flags(), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
