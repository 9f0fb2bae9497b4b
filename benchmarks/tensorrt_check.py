"""TensorRT check for the jetson targets: a prepared script for a machine with an NVIDIA GPU.

NOT YET RUN: no GPU machine was available when it was written. The static rule check in
verify (edgeforge/contracts.py) is what protects jetson builds until this has run.

Two steps, because onnxruntime (CPU, what edgeforge builds with) and onnxruntime-gpu cannot
share one environment:

    # 1. on any host with edgeforge's environment: MobileNetV2 (random He-normal weights,
    #    BatchNorm statistics from real crops, as benchmarks/common.py makes it) for jetson-orin
    #    in INT8, FP16 and FP32
    .venv/bin/python benchmarks/tensorrt_check.py build --out trt-check

    # 2. on the GPU machine, in an environment with the runtime only
    python3 -m venv /tmp/trt && /tmp/trt/bin/pip install onnxruntime-gpu tensorrt numpy
    /tmp/trt/bin/python benchmarks/tensorrt_check.py check --out trt-check [--json trt.json]

``check`` uses the on-device runner (the edgeforge/runner package: numpy and
onnxruntime only) with the TensorRT options the build recorded, and checks, in one run:
  - every node of the INT8 and FP16 artifacts is placed on TensorrtExecutionProvider;
  - INT8 is faster than FP16 and FP16 faster than FP32, at batch 1 and 8 (p50 ratios);
  - the INT8 and FP16 drift against the float reference is within the build's budget.
Exit 0 when all hold, 1 when one does not, 4 when TensorRT is not available.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRECISIONS = ("int8", "fp16", "fp32")
BATCHES = (1, 8)


def build(out: Path, project: Path | None = None) -> None:
    sys.path.insert(0, str(REPO))
    from benchmarks.common import vision_project
    from edgeforge import api

    if project is None:
        project = vision_project(out / "mobilenet_v2", "mobilenet_v2", calib=32, evaluation=64, init="calibrated")
    for precision in PRECISIONS:
        r = api.build(project, "jetson-orin", precision=precision, out=out / f"jetson-orin-{precision}")
        c = r.manifest["verify"].get("contract") or {}
        print(f"{precision}: {r.out_dir} verify {r.manifest['verify']['status']}, "
              f"{c.get('provider')} rules {c.get('status')} ({c.get('quantize_linear', 0)} QuantizeLinear)")


def _runner():
    """The runner package loaded by path under its zipapp name (this environment has numpy and
    the runtime only, not edgeforge's dependencies): its modules' functions in one namespace."""
    import types

    pkg = REPO / "edgeforge" / "runner"
    spec = importlib.util.spec_from_file_location("edgeforge_runner", pkg / "__init__.py",
                                                  submodule_search_locations=[str(pkg)])
    sys.modules["edgeforge_runner"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules["edgeforge_runner"])
    ns = types.SimpleNamespace()
    for name in ("reference", "predictors", "placement", "metrics", "timing"):
        ns.__dict__.update(vars(importlib.import_module("edgeforge_runner." + name)))
    return ns


def check(out: Path, runs: int, cpu_dry_run: bool = False) -> dict:
    import numpy as np
    import onnxruntime as ort

    r = _runner()
    if "TensorrtExecutionProvider" not in ort.get_available_providers() and not cpu_dry_run:
        print(f"TensorrtExecutionProvider not available (onnxruntime {ort.__version__}: "
              f"{', '.join(ort.get_available_providers())})", file=sys.stderr)
        sys.exit(4)
    report = {"onnxruntime": ort.__version__, "artifacts": {}, "checks": [],
              "dry_run": "CPU only: exercises the script, the figures mean nothing" if cpu_dry_run else None}
    sessions = {}
    for precision in PRECISIONS:
        d = out / f"jetson-orin-{precision}"
        m = json.loads((d / "manifest.json").read_text())
        feeds, ref, labels = r.load_reference(str(d), m)
        rt = m["runtime"]
        model = str(d / m["artifact"]["path"])
        cache = str(d / r.ENGINE_CACHE)
        one = {k: v[:1] for k, v in feeds.items()}
        run, load = r.load_twice(lambda: r.onnx_predictor(model, None, rt["execution_providers"],  # noqa: B023
                                                          rt.get("provider_options"), cache), one)  # noqa: B023
        place = r.onnx_placement(model, rt["execution_providers"], one, rt.get("provider_options"), cache)
        drift = r.drift_metrics(r.predict_all(run, feeds, 8), ref, labels)
        sessions[precision] = (run, feeds)
        report["artifacts"][precision] = {"placement": place, "load": load,
                                          "drift": {k: v for k, v in drift.items() if k != "outputs"},
                                          "min_cosine": (m.get("quantization") or {}).get("min_cosine", 0.99)}
    # timing: all precisions and batch sizes side by side, interleaved, in one run
    p50 = {}
    for batch in BATCHES:
        for precision, (run, feeds) in sessions.items():
            x = {k: v[:batch] for k, v in feeds.items()}
            lat = r.measure(r.timed(run, x), 20, runs)
            p50[(precision, batch)] = float(np.median(lat["samples_ms"]))
    report["p50_ms"] = {f"{p}@{b}": v for (p, b), v in p50.items()}

    def verdict(name, ok, detail):
        report["checks"].append({"check": name, "passed": bool(ok), "detail": detail})

    for precision in ("int8", "fp16"):
        place = report["artifacts"][precision]["placement"]
        verdict(f"{precision}: all nodes on TensorRT", place["on_first_provider"] == place["nodes"], place["summary"])
        a = report["artifacts"][precision]
        cos = a["drift"]["cosine"]
        verdict(f"{precision}: drift within budget", cos >= a["min_cosine"], f"cosine {cos:.4f} >= {a['min_cosine']}")
    for batch in BATCHES:
        f16 = p50[("fp32", batch)] / p50[("fp16", batch)]
        i8 = p50[("fp16", batch)] / p50[("int8", batch)]
        verdict(f"batch {batch}: FP16 faster than FP32", f16 > 1, f"fp32/fp16 = {f16:.2f}x")
        verdict(f"batch {batch}: INT8 faster than FP16", i8 > 1, f"fp16/int8 = {i8:.2f}x")
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="TensorRT placement, speed order and drift of the jetson-orin builds")
    ap.add_argument("step", choices=("build", "check"))
    ap.add_argument("--out", default="trt-check", help="where the builds go (build) / are read (check)")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--json", help="write the check's figures here")
    ap.add_argument("--project", help="build: this model project instead of MobileNetV2")
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="check: run without TensorRT (exercises the script; placement checks then fail)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.step == "build":
        os.environ.setdefault("FLAGS_enable_pir_api", "0")
        build(out, Path(args.project) if args.project else None)
        return 0
    report = check(out, args.runs, args.cpu_dry_run)
    if report["dry_run"]:
        print(f"DRY RUN: {report['dry_run']}")
    for c in report["checks"]:
        print(f"{'ok  ' if c['passed'] else 'FAIL'} {c['check']}: {c['detail']}")
    print("p50 ms: " + ", ".join(f"{k} {v:.3f}" for k, v in report["p50_ms"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0 if all(c["passed"] for c in report["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
