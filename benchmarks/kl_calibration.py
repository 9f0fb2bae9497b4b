"""KL calibration cost in Paddle PTQ: abs_max vs KL (fast search) vs KL (Paddle's reference).

MobileNetV2 (random weights) exported as a legacy program, 32 calibration crops (224x224)
from sklearn's two sample photos, 4 batches of 8. One run, one table:

    .venv/bin/python benchmarks/kl_calibration.py                   # abs_max, KL-fast
    .venv/bin/python benchmarks/kl_calibration.py --with-reference  # + KL reference (~5 min)
    .venv/bin/python benchmarks/kl_calibration.py --onnx            # the ONNX path's goals (issue 47)

--onnx checks the goals of issue 47 on the ONNX path, on a MobileNetV2 trained briefly on
sklearn's digits (benchmarks/common.digits_project, the zoo's recipe: random weights make a deep
BatchNorm net's INT8 cosine meaningless): edgeforge's KL against its abs_max (the quantize.onnx
step's seconds, cold cache, no float-layer search; goal <= 1.5x), and against onnxruntime
quantize_static (Entropy, its documented pre-processing, QDQ, per-channel) on the same
calibration data: cosine to the float model on the evaluation images (goal: within 0.005),
p50 (onnxruntime, batch 1, interleaved, spinning off) and size.

Seconds are wall and process-CPU time (all threads) of one PostTrainingQuantization run
(construct, quantize, save), after an untimed warm-up run; with --repeat N, abs_max and KL-fast
alternate N times and the table shows the best and the median of each (the ratios use the best).
The wall ratio is the goal; the CPU ratio is steadier on a shared machine. --keep-bytes 0 makes
fast_kl() rerun the program in the sampling pass as Paddle does (no kept activations). With
--with-reference the KL-fast thresholds are also checked equal to the reference's.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["FLAGS_enable_pir_api"] = "0"      # legacy ProgramDesc (TOOLCHAIN.md)
os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def calibration_batches(n: int = 32, batch: int = 8, size: int = 224, seed: int = 0):
    from sklearn.datasets import load_sample_images

    images = load_sample_images().images            # two 427x640x3 uint8 photos
    rng = np.random.default_rng(seed)
    crops = []
    for k in range(n):
        img = images[k % len(images)]
        y = int(rng.integers(0, img.shape[0] - size + 1))
        x = int(rng.integers(0, img.shape[1] - size + 1))
        crop = img[y:y + size, x:x + size].astype(np.float32) / 255.0
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        crops.append(((crop - MEAN) / STD).transpose(2, 0, 1))
    data = np.ascontiguousarray(np.stack(crops), dtype=np.float32)
    return [data[i:i + batch] for i in range(0, n, batch)]


def export_mobilenet_v2(out_dir: Path) -> Path:
    import paddle

    paddle.disable_static()
    paddle.seed(0)
    net = paddle.vision.models.mobilenet_v2(pretrained=False)
    net.eval()
    prefix = out_dir / "model"
    paddle.jit.save(net, str(prefix),
                    input_spec=[paddle.static.InputSpec([None, 3, 224, 224], "float32", name="x")])
    assert (out_dir / "model.pdmodel").is_file(), "export did not write a legacy program"
    return out_dir


def run_ptq(model_dir: Path, out_dir: Path, batches, algo: str):
    """One PTQ run; returns ((wall seconds, CPU seconds of all threads), {var: threshold})."""
    import paddle
    from paddle.static.quantization import PostTrainingQuantization

    paddle.enable_static()
    scope = paddle.static.Scope()
    exe = paddle.static.Executor(paddle.CPUPlace())
    with paddle.static.scope_guard(scope):
        t0, c0 = time.perf_counter(), time.process_time()
        ptq = PostTrainingQuantization(
            executor=exe, scope=scope, model_dir=str(model_dir),
            model_filename="model.pdmodel", params_filename="model.pdiparams",
            data_loader=lambda: ({"x": b} for b in batches), batch_nums=len(batches),
            algo=algo, onnx_format=False, weight_quantize_type="channel_wise_abs_max",
        )
        with contextlib.redirect_stderr(io.StringIO()):   # tqdm bars
            ptq.quantize()
        ptq.save_quantized_model(str(out_dir), model_filename="model.pdmodel",
                                 params_filename="model.pdiparams")
        seconds = (time.perf_counter() - t0, time.process_time() - c0)
    thresholds = dict(ptq._quantized_var_threshold or ptq._quantized_threshold)
    return seconds, thresholds


def onnx_goals(repeat: int = 1) -> int:
    """Issue 47's KL goals on the ONNX path (see the module docstring); exit 1 if one is missed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import onnxruntime
    from common import digits_project
    from quantization import ort_entropy

    from edgeforge import api
    from edgeforge.quant.speed import interleaved, p50
    from edgeforge.runner.metrics import drift_metrics
    from edgeforge.runner.predictors import onnx_predictor, predict_all

    onnxruntime.set_default_logger_severity(3)         # its graph-cleaning warnings are not ours

    with tempfile.TemporaryDirectory(prefix="ef-kl-") as tmp:
        work = Path(tmp)
        project, facts = digits_project(work / "mobilenet_v2", "mobilenet_v2")
        with np.load(project / "data" / "eval.npz") as z:
            feeds = {"x": z["x"]}
        with np.load(project / "data" / "calib.npz") as z:
            cal = [{"x": z["x"]}]
        kw = dict(precision="int8", float_fallback=False, no_cache=True)
        fp32 = api.build(project, "linux-x86", precision="fp32", out=work / "fp32").out_dir / "model.onnx"
        secs: dict[str, list[float]] = {"KL": [], "abs_max": []}
        for i in range(max(1, repeat)):
            for algo in ("abs_max", "KL"):
                m = api.build(project, "linux-x86", out=work / f"{algo}-{i}", algo=algo, **kw).manifest
                secs[algo].append(sum(st["seconds"] for st in m["steps"] if st["pass"] == "quantize.onnx"))
        ort_s, ort = ort_entropy(fp32, cal, work)
        models = {"edgeforge KL": work / "KL-0" / "model.onnx", "edgeforge abs_max": work / "abs_max-0" / "model.onnx",
                  "onnxruntime Entropy": ort}
        ref = predict_all(onnx_predictor(fp32), feeds)
        cos = {k: drift_metrics(predict_all(onnx_predictor(p), feeds), ref)["cosine"] for k, p in models.items()}
        times = interleaved({"fp32": fp32, **models}, feeds, threads=2)
        size = {k: p.stat().st_size / 1e6 for k, p in {"fp32": fp32, **models}.items()}
    kl, ab = min(secs["KL"]), min(secs["abs_max"])
    print(f"MobileNetV2 on digits ({facts.get('size')}x{facts.get('size')}, float accuracy "
          f"{facts.get('float_accuracy', float('nan')):.3f}), ONNX path, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'method':<22} {'calib s':>8} {'cosine':>8} {'p50 ms':>7} {'size MB':>8}")
    calib = {"edgeforge KL": kl, "edgeforge abs_max": ab, "onnxruntime Entropy": ort_s}
    for k in models:
        print(f"{k:<22} {calib[k]:8.2f} {cos[k]:8.4f} {p50(times[k]):7.3f} {size[k]:8.2f}")
    print(f"{'fp32':<22} {'-':>8} {1.0:8.4f} {p50(times['fp32']):7.3f} {size['fp32']:8.2f}")
    gap = cos["onnxruntime Entropy"] - cos["edgeforge KL"]
    ok_t, ok_c = kl / ab <= 1.5, gap <= 0.005
    print(f"KL / abs_max = {kl / ab:.2f}x (goal <= 1.5x: {'met' if ok_t else 'NOT met'}; all: "
          f"KL {', '.join(f'{x:.2f}' for x in secs['KL'])}, abs_max {', '.join(f'{x:.2f}' for x in secs['abs_max'])})")
    print(f"cosine: onnxruntime Entropy - edgeforge KL = {gap:+.4f} (goal <= 0.005: {'met' if ok_c else 'NOT met'})")
    return 0 if ok_t and ok_c else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--with-reference", action="store_true",
                    help="also run KL with Paddle's own (slow, ~5 min) threshold search")
    ap.add_argument("--repeat", type=int, default=1,
                    help="time abs_max and KL-fast this many times each (best and median)")
    ap.add_argument("--keep-bytes", type=int, default=None,
                    help="fast_kl(keep_bytes=...): memory for kept activations (default: auto)")
    ap.add_argument("--onnx", action="store_true",
                    help="the ONNX path's goals on a digits-trained MobileNetV2 (issue 47)")
    args = ap.parse_args(argv)
    if args.onnx:
        return onnx_goals(args.repeat)

    import warnings
    warnings.filterwarnings("ignore")
    import paddle
    paddle.set_device("cpu")
    from edgeforge.quant.kl import fast_kl

    batches = calibration_batches()
    load0 = f"{os.getloadavg()[0]:.2f}"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = export_mobilenet_v2(tmp / "fp32")
        run_ptq(model_dir, tmp / "warmup", batches[:1], "abs_max")   # one-time costs, untimed
        all_abs, all_fast = [], []
        for _ in range(max(1, args.repeat)):
            all_abs.append(run_ptq(model_dir, tmp / "abs_max", batches, "abs_max")[0])
            with fast_kl(keep_bytes=args.keep_bytes):
                sec, th_fast = run_ptq(model_dir, tmp / "kl_fast", batches, "KL")
            all_fast.append(sec)
        t_abs = (min(w for w, _ in all_abs), min(c for _, c in all_abs))
        t_fast = (min(w for w, _ in all_fast), min(c for _, c in all_fast))
        rows.append(("abs_max", t_abs, t_abs))             # (name, seconds, ratio base)
        rows.append(("KL, fast_kl()", t_fast, t_abs))
        if len(all_abs) > 1:
            m_abs = tuple(float(np.median([t[i] for t in all_abs])) for i in (0, 1))
            m_fast = tuple(float(np.median([t[i] for t in all_fast])) for i in (0, 1))
            rows.append(("abs_max, median", m_abs, m_abs))
            rows.append(("KL, fast_kl(), median", m_fast, m_abs))
        same = None
        if args.with_reference:
            t_ref, th_ref = run_ptq(model_dir, tmp / "kl_ref", batches, "KL")
            rows.append(("KL, Paddle reference", t_ref, t_abs))
            same = th_ref.keys() == th_fast.keys() and all(
                np.array_equal(np.asarray(th_ref[k]), np.asarray(th_fast[k])) for k in th_ref)

    title = "Paddle PTQ on MobileNetV2, 32 calibration images (4 x 8), 2048-bin histograms"
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for col in ("method", "wall s", "/ abs_max", "CPU s", "/ abs_max "):
            table.add_column(col, justify="right" if col != "method" else "left")
        for name, (wall, cpu), base in rows:
            table.add_row(name, f"{wall:.2f}", f"{wall / base[0]:.2f}x",
                          f"{cpu:.2f}", f"{cpu / base[1]:.2f}x")
        Console().print(table)
    except ImportError:
        print(title)
        for name, (wall, cpu), base in rows:
            print(f"  {name:<22} {wall:8.2f} s wall {wall / base[0]:6.2f}x"
                  f"  {cpu:8.2f} s CPU {cpu / base[1]:6.2f}x")
    print(f"({os.cpu_count()} CPUs; load average before/after: {load0} / {os.getloadavg()[0]:.2f})")
    ratio = t_fast[0] / t_abs[0]
    print(f"KL-fast / abs_max = {ratio:.2f}x (goal <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")
    if same is not None:
        print(f"KL-fast thresholds identical to the reference's: {same}")
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
