#!/usr/bin/env python3
"""edgeforge on-device runner: loads an artifact, measures it, compares it with float.

One file, no edgeforge import: needs Python 3, numpy and the model runtime (paddlelite or
onnxruntime). edgeforge's host-side verify imports the same functions, so host and device
figures are computed by the same code.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

RUNNER_VERSION = 1


# ---------------------------------------------------------------- predictors

def onnx_predictor(model_path, threads=None, providers=None):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
    available = ort.get_available_providers()
    wanted = [p for p in (providers or ["CPUExecutionProvider"]) if p in available] or ["CPUExecutionProvider"]
    sess = ort.InferenceSession(str(model_path), sess_options=opts, providers=wanted)
    names = [i.name for i in sess.get_inputs()]

    def run(feeds):
        return [np.asarray(o) for o in sess.run(None, {n: feeds[n] for n in names})]

    run.runtime = {"name": "onnxruntime", "version": ort.__version__, "providers": sess.get_providers()}
    run.input_names = names
    return run


def lite_predictor(model_path, threads=None, power_mode=None, input_names=None):
    from paddlelite import lite

    cfg = lite.MobileConfig()
    cfg.set_model_from_file(str(model_path))
    for setter, value in (("set_threads", threads), ("set_power_mode", power_mode)):
        if value is not None and hasattr(cfg, setter):
            if setter == "set_power_mode":
                value = getattr(lite.PowerMode, str(value), value)
            getattr(cfg, setter)(value)
    pred = lite.create_paddle_predictor(cfg)
    names = list(input_names or pred.get_input_names())

    def run(feeds):
        order = names or list(feeds)
        for i, name in enumerate(order):
            pred.get_input(i).from_numpy(np.ascontiguousarray(feeds[name]))
        pred.run()
        # get_output(i) past the last output aborts the process: ask for the count first.
        return [np.array(pred.get_output(i).numpy(), copy=True)   # a view of the predictor's buffer
                for i in range(len(pred.get_output_names()))]

    try:
        import paddlelite
        version = pred.get_version() or getattr(paddlelite, "__version__", None) or _dist_version("paddlelite")
    except Exception:  # noqa: BLE001
        version = "unknown"
    run.runtime = {"name": "paddlelite", "version": version}
    run.input_names = names
    return run


def _dist_version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:  # noqa: BLE001
        return "unknown"


def make_predictor(manifest, build_dir, threads=None, power_mode=None):
    art = os.path.join(build_dir, manifest["artifact"]["path"])
    names = [i["name"] for i in manifest["inputs"]]
    if manifest["backend"] == "onnx":
        return onnx_predictor(art, threads, manifest.get("runtime", {}).get("execution_providers"))
    if manifest["backend"] == "lite":
        return lite_predictor(art, threads, power_mode, names)
    raise ValueError("unknown backend %r" % manifest["backend"])


def predict_all(run, feeds, batch=None):
    """Run over all samples; batch=None runs sample by sample stacked in chunks of 64."""
    names = list(feeds)
    n = len(feeds[names[0]])
    batch = batch or 64
    chunks = []
    for i in range(0, n, batch):
        chunks.append(run({k: feeds[k][i:i + batch] for k in names}))
    return [np.concatenate([c[j] for c in chunks]) for j in range(len(chunks[0]))]


# ---------------------------------------------------------------- drift

def drift_metrics(outputs, reference, labels=None):
    """Compare outputs with the float reference. Figures for output 0 at the top level,
    every output under "outputs". accuracy_drop is in percentage points."""
    per = []
    for out, ref in zip(outputs, reference):
        out = np.asarray(out, dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        if out.shape != ref.shape:
            raise ValueError("output shape %s differs from reference %s" % (out.shape, ref.shape))
        diff = np.abs(out - ref)
        n = out.shape[0] if out.ndim else 1
        o2 = out.reshape(n, -1)
        r2 = ref.reshape(n, -1)
        denom = np.linalg.norm(o2, axis=1) * np.linalg.norm(r2, axis=1)
        num = np.sum(o2 * r2, axis=1)
        cos = np.where(denom > 0, num / np.where(denom > 0, denom, 1.0), np.where(np.all(o2 == r2, axis=1), 1.0, 0.0))
        ref_scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        m = {
            "max_abs_error": float(diff.max()) if diff.size else 0.0,
            "mean_abs_error": float(diff.mean()) if diff.size else 0.0,
            "rel_max_abs_error": float(diff.max() / ref_scale) if ref_scale > 0 and diff.size else 0.0,
            "cosine": float(np.mean(cos)),
            "top1_agreement": None, "accuracy": None, "float_accuracy": None, "accuracy_drop": None,
        }
        if out.ndim >= 2 and out.shape[-1] > 1:
            top_o = out.reshape(n, -1).argmax(1) if out.ndim == 2 else out.argmax(-1)
            top_r = ref.reshape(n, -1).argmax(1) if ref.ndim == 2 else ref.argmax(-1)
            m["top1_agreement"] = float(np.mean(top_o == top_r))
            if labels is not None and out.ndim == 2 and len(labels) == n:
                lab = np.asarray(labels)
                m["accuracy"] = float(np.mean(top_o == lab))
                m["float_accuracy"] = float(np.mean(top_r == lab))
                m["accuracy_drop"] = round((m["float_accuracy"] - m["accuracy"]) * 100.0, 10)
        per.append(m)
    top = dict(per[0]) if per else {}
    top["outputs"] = per
    return top


def load_reference(build_dir, manifest):
    ref = manifest["reference"]
    with np.load(os.path.join(build_dir, ref["inputs"]), allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}
    labels = data.pop("labels", None)
    with np.load(os.path.join(build_dir, ref["outputs"]), allow_pickle=False) as z:
        outputs = [z["output_%d" % i] for i in range(len(z.files))]
    names = [i["name"] for i in manifest["inputs"]]
    return {k: data[k] for k in names}, outputs, labels


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description="edgeforge on-device runner")
    ap.add_argument("build_dir")
    ap.add_argument("--drift-only", action="store_true")
    args = ap.parse_args(argv)
    with open(os.path.join(args.build_dir, "manifest.json")) as fh:
        manifest = json.load(fh)
    run = make_predictor(manifest, args.build_dir, manifest.get("runtime", {}).get("threads"))
    feeds, ref, labels = load_reference(args.build_dir, manifest)
    outs = predict_all(run, feeds)
    json.dump({"runtime": run.runtime, "drift": drift_metrics(outs, ref, labels)}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
