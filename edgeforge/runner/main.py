"""edgeforge on-device runner: loads an artifact, measures it, compares it with float.

Shipped to a device as one zipapp, ``edgeforge_runner-<sha256[:12]>.pyz`` (the package, built by
edgeforge.device.link.runner_app); needs Python 3.7+, numpy and the model runtime (paddlelite,
onnxruntime, or Paddle Lite's C++ ``benchmark_bin``). The host imports the pure modules
(predictors, metrics, postprocess, pipeline, limits), so host and device compute the same figures.

Commands (the host runs them over SSH):

    RUNNER.pyz probe [--benchmark-bin PATH]     JSON: python, numpy, runtimes, fingerprint
    RUNNER.pyz bench DIR --spec JSON            JSON lines, one per event (see bench.bench_events)
    RUNNER.pyz load DIR --spec JSON             JSON lines: a load curve (see load.load)
    RUNNER.pyz smoke DIR [--spec JSON]          JSON lines: drift of a release vs its budget
    RUNNER.pyz BUILD_DIR                        drift of a build directory (legacy)

``bench`` prints one line per event, each ``@@edgeforge {json}``, flushed as it happens, so a
host that loses the connection still holds what was measured before. Exit codes: 0 ok, 2 usage,
3 a file does not match its sha256, 4 a runtime is missing, 5 the runtime failed, 6 (smoke) the
drift is over budget, 7 the build's own files do not fit its manifest (``error`` kind ``build``:
the host blames the build, not the device), 130 stopped by a signal.
"""
from __future__ import annotations

import json
import os
import sys

from .bench import bench
from .device_facts import probe
from .load import load_main
from .metrics import drift_metrics
from .predictors import make_predictor, predict_per_batch_size
from .protocol import EXIT_OK, RUNNER_VERSION, spec_command
from .reference import load_reference
from .smoke import smoke_main


# ---------------------------------------------------------------- command line

def main(argv=None):
    import argparse

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "probe":
        ap = argparse.ArgumentParser(prog="edgeforge_runner probe")
        ap.add_argument("--benchmark-bin")
        ap.add_argument("--workdir")
        args = ap.parse_args(argv[1:])
        out = probe(args.benchmark_bin, args.workdir)
        out["runner_version"] = RUNNER_VERSION
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
        return EXIT_OK
    if argv and argv[0] == "bench":
        return spec_command("bench", argv[1:], bench)
    if argv and argv[0] == "smoke":
        return smoke_main(argv[1:])
    if argv and argv[0] == "load":
        return load_main(argv[1:])
    ap = argparse.ArgumentParser(description="edgeforge on-device runner")
    ap.add_argument("build_dir")
    args = ap.parse_args(argv)
    with open(os.path.join(args.build_dir, "manifest.json")) as fh:
        manifest = json.load(fh)
    threads = manifest.get("runtime", {}).get("threads")
    feeds, ref, labels = load_reference(args.build_dir, manifest)
    outs, predictors = predict_per_batch_size(lambda: make_predictor(manifest, args.build_dir, threads), feeds)
    json.dump({"drift": drift_metrics(outs, ref, labels), "predictors": predictors}, sys.stdout)
    return 0
