"""INT8 schemes on this host's CPU: how far onnxruntime's optimized INT8 kernels are from the
exact QDQ arithmetic, per scheme (uint8/int8 activations, reduce_range, symmetric).

The reference is the same QDQ model run with graph optimizations off: every QuantizeLinear and
DequantizeLinear then runs as written, in float, which is bit-identical on x86 and aarch64. With
optimizations on, onnxruntime fuses the QDQ groups into integer kernels (QLinearConv, QGemm);
on x86 without VNNI, u8 x s8 products go through VPMADDUBSW, whose int16 intermediate can
saturate. The figures say which scheme a CPU target should write.

    .venv/bin/python benchmarks/int8_schemes.py [--model digits|mobilenet_v2] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgeforge.targets import QuantScheme

SCHEMES = {
    "u8s8": QuantScheme(activations="uint8", weights="int8"),
    "u8s8 reduce_range": QuantScheme(activations="uint8", weights="int8", reduce_range=True),
    "s8s8": QuantScheme(activations="int8", weights="int8"),
    "s8s8 symmetric (TensorRT)": QuantScheme(activations="int8", weights="int8", symmetric_activations=True,
                                             quantize_bias=False),
}


def project_for(model: str, work: Path) -> Path:
    if model == "digits":
        from benchmarks.quantization import digits_project
        return digits_project()
    from benchmarks.common import vision_project
    return vision_project(work / model, model, calib=32, evaluation=64, init="calibrated")


def session(path, optimize: bool):
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads = 2
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")   # TOOLCHAIN 18
    if not optimize:
        o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])


def outputs(sess, x, batch=64):
    name = sess.get_inputs()[0].name
    return np.concatenate([sess.run(None, {name: x[i:i + batch]})[0] for i in range(0, len(x), batch)])


def output_step(path) -> float:
    """The quantization step of the graph output (scale of the DequantizeLinear producing it)."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    outs = {o.name for o in m.graph.output}
    producer = {o: n for n in m.graph.node for o in n.output}
    for name in outs:
        n = producer.get(name)
        while n is not None and n.op_type != "DequantizeLinear":
            n = producer.get(n.input[0])
        if n is not None:
            return float(np.max(inits[n.input[1]]))
    return float("nan")


def p50(sess, one, runs=200):
    name = sess.get_inputs()[0].name
    for _ in range(20):
        sess.run(None, {name: one})
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, {name: one})
        ts.append((time.perf_counter() - t) * 1e3)
    return float(np.median(ts))


def measure(project: Path, work: Path) -> list[dict]:
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from edgeforge import api
    from edgeforge.quant.onnx_ptq import paddle_kl_entropy, scheme_options

    fp32 = api.build(project, "linux-x86", precision="fp32", out=work / "fp32")
    pre = work / "pre.onnx"
    quant_pre_process(str(fp32.out_dir / "model.onnx"), str(pre))
    with np.load(project / "data/calib.npz") as z:
        calib = z["x"][:320]
    with np.load(project / "data/eval.npz") as z:
        x, labels = z["x"], (z["labels"] if "labels" in z.files else None)
    ref = outputs(session(pre, True), x)
    rows = []
    for label, scheme in SCHEMES.items():
        batches = [{"x": calib[i:i + 32]} for i in range(0, len(calib), 32)]

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter(batches)  # noqa: B023 - one Reader per iteration, used in it

            def get_next(self):
                return next(self.it, None)

        out = work / (label.split()[0] + ("-rr" if scheme.reduce_range else "")
                      + ("-sym" if scheme.symmetric_activations else "") + ".onnx")
        with paddle_kl_entropy("kl"):
            quantize_static(str(pre), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            calibrate_method=CalibrationMethod.Entropy, **scheme_options(scheme))
        fast, exact = session(out, True), session(out, False)
        a, b = outputs(fast, x), outputs(exact, x)
        diff = np.abs(a - b)
        step = output_step(out)
        cos = float(np.mean(np.sum(a * ref, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(ref, axis=1))))
        rows.append({"scheme": label, "values": int(diff.size),
                     "differ": int(np.sum(diff > 1e-5 * max(1.0, float(np.abs(b).max())))),
                     "max_abs_diff": float(diff.max()), "max_steps": float(diff.max() / step) if step else None,
                     "accuracy": float(np.mean(a.argmax(1) == labels)) if labels is not None else None,
                     "cosine_vs_float": cos, "p50_ms_b1": p50(fast, x[:1])})
    return rows


def main(argv=None) -> int:
    from edgeforge.contracts import host_cpu_flags, int8_flags

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="digits")
    ap.add_argument("--project", help="a model project directory instead of --model")
    ap.add_argument("--work")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edgeforge-schemes-") as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        rows = measure(Path(args.project) if args.project else project_for(args.model, work), work)
    flags = int8_flags(host_cpu_flags())
    print(f"{args.model}: onnxruntime optimized INT8 vs exact QDQ; CPU flags: {' '.join(flags)}")
    print(f"{'scheme':<27} {'differ':>11} {'max diff':>9} {'steps':>6} {'acc':>6} {'cosine':>7} {'p50 ms':>7}")
    for r in rows:
        acc = f"{r['accuracy'] * 100:.2f}" if r["accuracy"] is not None else "-"
        print(f"{r['scheme']:<27} {r['differ']:>5}/{r['values']:<5} {r['max_abs_diff']:>9.4f} "
              f"{r['max_steps']:>6.1f} {acc:>6} {r['cosine_vs_float']:>7.4f} {r['p50_ms_b1']:>7.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "cpu_flags": flags, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
