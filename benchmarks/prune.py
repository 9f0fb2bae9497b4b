#!/usr/bin/env python3
"""``--prune`` side by side with the unpruned build, in one run (issue 30): paddle.vision's
resnet18 (the zoo's, trained briefly on sklearn's digits at 32x32, benchmarks/common.py
digits_project, with 256 calibration and 200 labelled evaluation digits, so the build's budget
is top-1 accuracy: a drop of at most 1 point).

Rows: {unpruned, pruned} x {fp32, INT8} for linux-x86 (onnxruntime). Columns: FLOPs and
parameters (PaddleSlim's count, from the prune record), artifact size, top-1 accuracy on the
evaluation digits, cosine against the unpruned float model, host p50 at batch 1 (onnxruntime,
all four artifacts timed interleaved in one process, spinning off), and the build's seconds.

    python benchmarks/prune.py [--models resnet18] [--share 0.3] [--steps 300]
                               [--json out.json] [--md out.md]
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


def run_model(arch: str, work: Path, share: float, steps: int, max_seconds: float) -> list[dict]:
    from edgeforge import api
    from edgeforge.quant.speed import interleaved, p50
    from edgeforge.runner.predictors import onnx_predictor, predict_all
    from edgeforge.task.metrics import cosine

    root, facts = digits_project(work / arch / "project", arch, calib=256, evaluation=200)
    labels = np.load(root / "data" / "labels.npy")
    feeds = dict(np.load(root / "data" / "eval.npz"))
    np.savez(root / "data" / "eval.npz", labels=labels, **feeds)      # the budget in accuracy points
    with open(root / "edgeforge.toml", "a") as fh:
        fh.write(f"\n[prune]\nsteps = {steps}\nmax_seconds = {max_seconds}\n")
    os.environ["EDGEFORGE_CACHE"] = str(work / arch / "cache")
    rows, models, reference = [], {}, None
    for pruned in (False, True):
        for precision in ("fp32", "int8"):
            name = f"{'pruned' if pruned else 'unpruned'} {precision}"
            t = time.perf_counter()
            r = api.build(root, "linux-x86", out=work / arch / name.replace(" ", "-"), precision=precision,
                          **({"prune": share} if pruned else {}))
            wall = time.perf_counter() - t
            m = r.manifest
            out = predict_all(onnx_predictor(r.out_dir / "model.onnx"), feeds)[0]
            if reference is None:
                reference = out
            p = m.get("prune") or {}
            rows.append({"model": arch, "variant": name, "flops": p.get("flops_after"),
                         "flops_before": p.get("flops_before"), "params": p.get("params_after"),
                         "size_bytes": m["artifact"]["size_bytes"],
                         "accuracy": float(np.mean(out.argmax(1) == labels)),
                         "cosine_vs_unpruned": float(cosine(out, reference)), "build_s": round(wall, 1),
                         "prune_step_s": next((s["seconds"] for s in m["steps"] if s["pass"] == "prune"), None),
                         "prune": {k: v for k, v in p.items() if k != "loss_curve"} or None,
                         "verify": m["verify"]["status"], "float_accuracy_trained": facts["float_accuracy"]})
            models[name] = r.out_dir / "model.onnx"
            print(f"{arch:10} {name:15} acc {rows[-1]['accuracy']:.3f}  cos {rows[-1]['cosine_vs_unpruned']:.4f}  "
                  f"{rows[-1]['size_bytes'] / 1e6:.2f} MB  build {wall:.0f}s", flush=True)
    samples = interleaved(models, {k: v[:1] for k, v in feeds.items()}, threads=min(2, os.cpu_count() or 1))
    for row in rows:
        row["p50_ms"] = round(p50(samples[row["variant"]]), 4)
    return rows


def table(rows: list[dict], flags: list[str], wall: float, share: float) -> str:
    cpu = platform.processor() or platform.machine()
    lines = [f"One run on {cpu} ({os.cpu_count()} cores; CPU flags: {', '.join(flags) or 'avx2 only'}), linux-x86, "
             f"--prune {share:g}, wall {wall / 60:.1f} min.", "",
             "| model | variant | FLOPs | params | size | top-1 | cosine vs unpruned | host p50 ms | build s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        p = r["prune"]
        flops = f"{p['flops_after'] / 1e6:.1f}M (-{p['flops_removed']:.1%})" if p else "(all)"
        params = f"{p['params_after'] / 1e6:.2f}M" if p else ""
        lines.append(f"| {r['model']} | {r['variant']} | {flops} | {params} | {r['size_bytes'] / 1e6:.2f} MB | "
                     f"{r['accuracy']:.3f} | {r['cosine_vs_unpruned']:.4f} | {r['p50_ms']:.3f} | {r['build_s']:.0f} |")
    first = next((r["prune"] for r in rows if r["prune"]), None)
    if first:
        lines += ["", f"Pruned from {first['flops_before'] / 1e6:.1f}M FLOPs, {first['params_before'] / 1e6:.2f}M "
                  f"parameters; filter ratio {first['filter_ratio']:.3f} on {first['convolutions']} convolutions; "
                  f"{first['steps']} fine-tune steps in {first['seconds']:.0f}s ({first['stopped_by']}); "
                  f"budget {first['budget']}: {first['figure']}."]
    return "\n".join(lines) + "\n"


def main() -> int:
    from edgeforge.contracts import host_cpu_flags, int8_flags

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18")
    ap.add_argument("--share", type=float, default=0.3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--max-seconds", type=float, default=240.0)
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ef-prune-bench-") as tmp:
        for arch in args.models.split(","):
            rows += run_model(arch.strip(), Path(tmp), args.share, args.steps, args.max_seconds)
    text = table(rows, int8_flags(host_cpu_flags()), time.perf_counter() - t0, args.share)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.md:
        Path(args.md).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
