"""Paddle Lite work in the Lite toolchain's interpreter: ``python lite_child.py JOB.json``.

This file imports nothing from edgeforge (the toolchain's Python 3.10 has only paddlelite,
numpy and onnxruntime); it loads the on-device runner package by path for the predictor code. The job is
JSON ``{"op": "opt"|"predict", ...}``; the outcome goes to ``JOB.json.out`` as
``{"ok": value}`` or ``{"error": "Type: message"}``. A crash of Paddle Lite kills this process,
and the parent (edgeforge.native.run_script) turns the signal into one line.
"""
import importlib.util
import json
import os
import sys
import traceback

_RUNNER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner")
_PACKAGE = "edgeforge_runner"       # the runner package under the name it has in the zipapp


def _predictors():
    """The runner's predictors module, its package loaded by path (``import edgeforge`` would
    need edgeforge's own dependencies, which this interpreter lacks)."""
    if _PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(_PACKAGE, os.path.join(_RUNNER_DIR, "__init__.py"),
                                                      submodule_search_locations=[_RUNNER_DIR])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[_PACKAGE] = mod
        spec.loader.exec_module(mod)
    return importlib.import_module(_PACKAGE + ".predictors")


def opt(job):
    from paddlelite import lite

    o = lite.Opt()
    o.set_model_file(os.path.join(job["model_dir"], "model.pdmodel"))
    o.set_param_file(os.path.join(job["model_dir"], "model.pdiparams"))
    o.set_valid_places(job["valid_targets"])
    o.set_model_type("naive_buffer")
    o.set_optimize_out(job["out_base"])
    if job.get("fp16"):
        o.enable_fp16()
    o.run()
    return 0


def predict(job):
    import numpy as np

    runner = _predictors()
    with np.load(job["inputs"]) as data:
        feeds = {k: data[k] for k in job["names"]}
    run = runner.lite_predictor(job["model"], input_names=job["names"])
    outs = runner.predict_all(run, feeds)
    np.savez(job["outputs"], **{"output_%d" % i: o for i, o in enumerate(outs)})
    return {"runtime": run.runtime, "num_outputs": len(outs)}


def main(job_path):
    with open(job_path) as fh:
        job = json.load(fh)
    try:
        outcome = {"ok": {"opt": opt, "predict": predict}[job["op"]](job)}
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        traceback.print_exc()
        outcome = {"error": "%s: %s" % (type(exc).__name__, exc)}
    with open(job_path + ".out", "w") as fh:
        json.dump(outcome, fh)


if __name__ == "__main__":
    main(sys.argv[1])
