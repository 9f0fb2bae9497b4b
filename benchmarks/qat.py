#!/usr/bin/env python3
"""Plain PTQ, PTQ with float fallback, and QAT side by side, in one run, for the networks where
plain INT8 misses the budget (issue 30): the zoo's trained mobilenet_v1, mobilenet_v2 and
shufflenet_v2 (paddle.vision, trained briefly on sklearn's digits at 32x32, benchmarks/common.py
digits_project: 32 calibration and 64 evaluation images, no labels in the build: the budget is
cosine >= 0.99).

Rows: each model x {plain PTQ (no float layers), PTQ with fallback (the default build), QAT
(``--qat``)}. Columns: float layers, worst-output cosine against float (verify's), top-1
accuracy on the 64 evaluation digits (labels used only here), host p50 at batch 1 (onnxruntime,
all variants and fp32 timed interleaved in one process, spinning off), and the INT8 step's
seconds (quantize.onnx + quantize.qat; export/convert are shared through one cache per model), and in
the QAT rows the float model's figure with only its input rounded to INT8 (``qat.input_rounding``:
the floor under every-layer-INT8 that the model itself sets).

    python benchmarks/qat.py [--models mobilenet_v1,mobilenet_v2,shufflenet_v2_x1_0]
                             [--steps 300] [--max-seconds 240] [--train-steps N]
                             [--evaluation 64] [--labels]
                             [--json out.json] [--md out.md]

``--train-steps`` trains the float models longer (or shorter) than the zoo recipe: how far PTQ
misses the budget depends on it (docs/qat.md, "the gap is the teacher's"). ``--labels`` puts the
digits' labels in the evaluation set, so every build judges INT8 by the task's metric (the top-1
drop in points, the default 1-point budget) instead of cosine; ``--evaluation`` sizes that set
(one image is 100/N points).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["FLAGS_enable_pir_api"] = "0"

import numpy as np

from common import digits_project

MODELS = ("mobilenet_v1", "mobilenet_v2", "shufflenet_v2_x1_0")
VARIANTS = {"plain PTQ": dict(float_fallback=False, min_cosine=1e-3),   # every layer INT8, whatever it costs
            "PTQ + fallback": {},
            "QAT": dict(qat=True)}


def _int8_seconds(manifest: dict) -> float:
    return sum(s["seconds"] for s in manifest["steps"] if s["pass"] in ("quantize.onnx", "quantize.qat"))


def run_model(arch: str, work: Path, steps: int, max_seconds: float, train_steps: int | None = None,
              evaluation: int = 64, labels: bool = False) -> list[dict]:
    from edgeforge import api
    from edgeforge.quant.speed import interleaved, p50
    from edgeforge.contracts import host_arithmetic
    from edgeforge.quant.arithmetic import predictor
    from edgeforge.runner.predictors import predict_all
    from edgeforge.targets import load_target

    arith = host_arithmetic(load_target("linux-x86"), "onnx")

    t0 = time.perf_counter()
    root, facts = digits_project(work / arch / "project", arch, train_steps=train_steps, evaluation=evaluation,
                                 labels=labels)
    train_s = time.perf_counter() - t0
    with open(root / "edgeforge.toml", "a") as fh:
        fh.write(f"\n[quantization.qat]\nsteps = {steps}\nmax_seconds = {max_seconds}\n")
    labels = np.load(root / "data" / "labels.npy")
    feeds = {k: v for k, v in np.load(root / "data" / "eval.npz").items() if k != "labels"}
    os.environ["EDGEFORGE_CACHE"] = str(work / arch / "cache")
    rows, models = [], {}
    fp32 = api.build(root, "linux-x86", out=work / arch / "fp32", precision="fp32")
    models["fp32"] = fp32.out_dir / "model.onnx"
    for name, kw in VARIANTS.items():
        t = time.perf_counter()
        r = api.build(root, "linux-x86", out=work / arch / name.replace(" ", "").replace("+", "-"), **kw)
        wall = time.perf_counter() - t
        m = r.manifest
        # verify's arithmetic: exact QDQ where this CPU's INT8 kernels are unsound (onnxruntime#26324)
        out = predict_all(predictor(r.out_dir / "model.onnx", arith), feeds)[0]
        q = m.get("qat") or {}
        rows.append({"model": arch, "variant": name, "float_layers": len(m["keep_float"]),
                     "cosine": m["verify"]["cosine"], "accuracy": float(np.mean(out.argmax(1) == labels)),
                     "float_accuracy": facts["float_accuracy"], "int8_step_s": round(_int8_seconds(m), 1),
                     "build_s": round(wall, 1), "verify": m["verify"]["status"],
                     "qat_shipped": q.get("shipped"), "qat_why": q.get("why"), "qat_steps": q.get("steps"),
                     "qat_seconds": q.get("seconds"), "train_s": round(train_s, 1),
                     "input_rounding": (q.get("input_rounding") or {}).get("figure")})
        models[name] = r.out_dir / "model.onnx"
        print(f"{arch:20} {name:15} float {rows[-1]['float_layers']:3d}  cosine {rows[-1]['cosine']:.4f}  "
              f"acc {rows[-1]['accuracy']:.3f}  int8 step {rows[-1]['int8_step_s']:.1f}s"
              + (f"  QAT: {q.get('shipped')} ({q.get('why')})" if q else ""), flush=True)
    samples = interleaved(models, {k: v[:1] for k, v in feeds.items()}, threads=min(2, os.cpu_count() or 1))
    for row in rows:
        row["p50_ms"] = round(p50(samples[row["variant"]]), 4)
        row["fp32_p50_ms"] = round(p50(samples["fp32"]), 4)
    return rows


def table(rows: list[dict], flags: list[str], wall: float) -> str:
    cpu = platform.processor() or platform.machine()
    lines = [f"One run on {cpu} ({os.cpu_count()} cores; INT8 CPU flags: {', '.join(flags) or 'none (AVX2 only)'}), "
             f"linux-x86, wall {wall / 60:.1f} min.", "",
             "| model | variant | float layers | cosine | top-1 (float) | host p50 ms (fp32) | INT8 step s "
             "| input rounding | QAT |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        qat = f"{r['qat_shipped']}: {r['qat_why']}" if r["qat_shipped"] else ""
        rounding = r.get("input_rounding") or ""
        lines.append(f"| {r['model']} | {r['variant']} | {r['float_layers']} | {r['cosine']:.4f} | "
                     f"{r['accuracy']:.3f} ({r['float_accuracy']:.3f}) | {r['p50_ms']:.3f} ({r['fp32_p50_ms']:.3f}) | "
                     f"{r['int8_step_s']:.1f} | {rounding} | {qat} |")
    return "\n".join(lines) + "\n"


MAX_EVALUATION = 1000       # of sklearn's 1797 digits: the rest calibrates and trains


def _evaluation(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_EVALUATION:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of images, 1 to {MAX_EVALUATION}")
    return n


def main() -> int:
    from edgeforge.contracts import host_cpu_flags, int8_flags

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--max-seconds", type=float, default=240.0)
    ap.add_argument("--train-steps", type=int, help="training steps of the float models (default: the zoo recipe's)")
    ap.add_argument("--evaluation", type=_evaluation, default=64,
                    help=f"evaluation images, 1 to {MAX_EVALUATION} (default 64)")
    ap.add_argument("--labels", action="store_true",
                    help="the evaluation labels in the build: INT8 is judged by the top-1 drop, not cosine")
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ef-qat-bench-") as tmp:
        for arch in args.models.split(","):
            rows += run_model(arch.strip(), Path(tmp), args.steps, args.max_seconds, args.train_steps,
                              args.evaluation, args.labels)
    text = table(rows, int8_flags(host_cpu_flags()), time.perf_counter() - t0)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.md:
        Path(args.md).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
