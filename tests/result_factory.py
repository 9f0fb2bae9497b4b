"""Synthetic bench results shaped like real ones, for demos, the docs screenshot and tests.

They are NOT measurements: latencies are drawn from a lognormal with AR(1) correlation between
consecutive samples and occasional slow outliers (the shape real timings have).

    .venv/bin/python tests/result_factory.py DIR          # a small fleet's results into DIR
    .venv/bin/python tests/result_factory.py --calibrate  # false-positive rate and power of `compare`
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgeforge.fsutil import write_files_atomic
from edgeforge.results.schema import SCHEMA
from edgeforge.results.stats import mad

PI4 = {"cpu_model": "Cortex-A72 (Raspberry Pi 4 Model B Rev 1.4)", "kernel": "6.1.21-v8+", "cores": 4,
       "governor": "performance", "arch": "aarch64", "mem_total_mb": 3793.0}
ORIN = {"cpu_model": "Cortex-A78AE (NVIDIA Jetson Orin Nano)", "kernel": "5.15.136-tegra", "cores": 6,
        "governor": "schedutil", "arch": "aarch64", "mem_total_mb": 7620.0}


def timing_samples(n: int = 200, median_ms: float = 10.0, *, sigma: float = 0.03, phi: float = 0.5,
                   outlier_rate: float = 0.02, seed: int = 0) -> list[float]:
    """Heavy-tailed, autocorrelated latencies (ms) whose median is about ``median_ms``."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    noise = lfilter([sigma * np.sqrt(1 - phi ** 2)], [1.0, -phi], rng.standard_normal(n))
    x = median_ms * np.exp(noise)
    slow = rng.random(n) < outlier_rate
    x[slow] *= 1.0 + rng.lognormal(np.log(0.5), 0.5, int(slow.sum()))
    return [round(float(v), 5) for v in x]


@dataclass
class Run:
    """What :func:`make_result` varies; everything else is a fixed, plausible Pi 4 run."""

    name: str = "digits"
    target: str = "rpi4"
    backend: str = "lite"
    precision: str = "int8"
    device: str = "pi-lab-3"
    fingerprint: dict | None = None
    runtime: tuple[str, str] = ("paddlelite", "2.13rc0")
    samples: list[float] | None = None
    median_ms: float = 10.0
    seed: int = 0
    n: int = 200
    phi: float = 0.5
    sigma: float = 0.03
    threads: int = 1
    size_bytes: int | None = None
    float_size_bytes: int | None = None
    accuracy_drop: float | None = None
    sha256: str | None = None
    task: tuple[str, str, float, float] | None = None   # [task] (kind, metric, float, artifact): drift.task
    temps: tuple[float, float] = (47.5, 49.0)


def make_result(**spec) -> dict:
    """One ``edgeforge.bench/1`` result; ``spec``: the fields of :class:`Run`. Precision ``fp32``
    gets a float-exact drift."""
    r = Run(**spec)
    xs = r.samples if r.samples is not None else timing_samples(r.n, r.median_ms, sigma=r.sigma, phi=r.phi,
                                                                seed=r.seed)
    arr = np.asarray(xs)
    med = float(np.median(arr))
    is_float = r.precision == "fp32"
    drop = r.accuracy_drop if r.accuracy_drop is not None else (0.0 if is_float else 0.6)
    float_acc = 0.968
    size = r.size_bytes if r.size_bytes is not None else (400118 if is_float else 144382)
    digest = r.sha256 or hashlib.sha256(f"{r.name}/{r.target}/{r.backend}/{r.precision}/{size}".encode()).hexdigest()
    fp = dict(r.fingerprint or PI4)
    fp.update(temp_c_before=r.temps[0], temp_c_after=r.temps[1], load_avg=[0.08, 0.05, 0.01], hostname=r.device)
    return {
        "schema": SCHEMA,
        "status": "ok",
        "created_at": "2024-06-01T12:00:00+00:00",
        "artifact": {"sha256": digest, "name": r.name, "path": "model.nb" if r.backend == "lite" else "model.onnx",
                     "target": r.target, "backend": r.backend, "precision": r.precision,
                     "size_bytes": size, "float_size_bytes": r.float_size_bytes or (None if is_float else 400118)},
        "device": {"name": r.device, "fingerprint": fp},
        "runtime": {"name": r.runtime[0], "version": r.runtime[1]},
        "settings": {"warmups": 10, "runs": len(xs), "threads": r.threads},
        "samples_ms": list(xs),
        "summary": {"p50_ms": med, "p90_ms": float(np.percentile(arr, 90)), "p99_ms": float(np.percentile(arr, 99)),
                    "mean_ms": float(arr.mean()), "mad_ms": mad(arr), "peak_rss_mb": 41.3},
        "drift": {"top1_agreement": 1.0 if is_float else 0.985, "accuracy": float_acc - drop / 100,
                  "float_accuracy": float_acc, "accuracy_drop": drop,
                  "max_abs_error": 2e-6 if is_float else 0.12, "cosine": 1.0 if is_float else 0.9991},
        "transfer": {"uploaded_bytes": size + 52000, "seconds": 0.8},
        **({"drift": task_drift(*r.task)} if r.task else {}),
    }


def task_drift(kind: str, metric: str, flt: float, art: float) -> dict:
    """A [task] model's drift, as bench records it: no top-1 figures, the task record."""
    return {"top1_agreement": None, "accuracy": None, "float_accuracy": None, "accuracy_drop": None,
            "max_abs_error": 0.05, "cosine": 0.998,
            "task": {"kind": kind, "metric": metric, "float": flt, "artifact": art,
                     "drop": round((flt - art) * 100, 6), "labelled": True}}


def make_load_result(**over) -> dict:
    """One ``edgeforge.load/1`` result (three closed-loop levels, knee analysed); ``over``
    replaces top-level keys."""
    from edgeforge.results.knee import analyse
    from edgeforge.results.load import LOAD_SCHEMA

    levels = [{"mode": "closed", "sessions": "shared", "threads": 2, "batch": 1, "concurrency": k,
               "rate": None, "completed": 100 * k, "errors": 0, "inferences_per_s": t,
               "samples_per_s": t, "p50_ms": p / 2, "p90_ms": p * 0.8, "p99_ms": p, "max_ms": p * 1.5,
               "cpu_util_pct": 50.0 * k, "peak_rss_mb": 70.0, "temp_c_before": None,
               "temp_c_after": None, "samples_ms": [p / 2] * 5}
              for k, t, p in ((1, 100.0, 2.0), (2, 190.0, 2.2), (4, 195.0, 4.0))]
    r = {"schema": LOAD_SCHEMA, "status": "ok", "created_at": "2026-12-01T00:00:00+00:00",
         "edgeforge_version": "0", "emulated": None,
         "artifact": {"sha256": "ab" * 32, "name": "digits", "target": "linux-x86", "backend": "onnx",
                      "precision": "int8"},
         "device": {"name": "local", "fingerprint": {"cpu_model": "x", "kernel": "k", "governor": None,
                                                     "temp_c_before": None, "temp_c_after": None,
                                                     "load_avg": [0, 0, 0], "emulated": None}},
         "runtime": {"name": "onnxruntime", "version": "1.23"},
         "settings": {"duration_s": 0.5, "warmup_s": 0.1}, "levels": levels,
         "analysis": analyse(levels, 3.0), "transfer": {"uploaded_bytes": 0, "seconds": 0}}
    r.update(over)
    return r


def demo_results() -> dict[str, dict]:
    """A small fleet: digits INT8 and fp32 on a Pi 4 and a Jetson Orin, and an INT8 rerun."""
    return {
        "digits-rpi4-int8": make_result(median_ms=3.1, seed=1),
        "digits-rpi4-fp32": make_result(precision="fp32", median_ms=5.4, seed=2),
        "digits-rpi4-int8-rerun": make_result(median_ms=3.1, seed=3, temps=(49.0, 50.5)),
        "digits-orin-int8": make_result(target="jetson-orin", backend="onnx", device="orin-1", fingerprint=ORIN,
                                        runtime=("onnxruntime", "1.23.2"), precision="int8", median_ms=0.82,
                                        seed=4, size_bytes=131072, float_size_bytes=409600, accuracy_drop=0.4),
        "digits-orin-fp32": make_result(target="jetson-orin", backend="onnx", device="orin-1", fingerprint=ORIN,
                                        runtime=("onnxruntime", "1.23.2"), precision="fp32", median_ms=1.05,
                                        seed=5, size_bytes=409600),
    }


def task_demo_results() -> dict[str, dict]:
    """A detector on a Pi 4 and a segmenter on a Jetson Orin, INT8 and fp32 ([task] models)."""
    orin = {"target": "jetson-orin", "backend": "onnx", "device": "orin-1", "fingerprint": ORIN,
            "runtime": ("onnxruntime", "1.23.2")}
    return {
        "picodet-rpi4-int8": make_result(name="picodet-s", median_ms=41.0, seed=6,
                                         task=("detection", "map50", 0.412, 0.398)),
        "picodet-rpi4-fp32": make_result(name="picodet-s", precision="fp32", median_ms=58.0, seed=7,
                                         task=("detection", "map50", 0.412, 0.412)),
        "ppliteseg-orin-int8": make_result(name="pp-liteseg", median_ms=9.6, seed=8,
                                           task=("segmentation", "miou", 0.723, 0.701), **orin),
        "ppliteseg-orin-fp32": make_result(name="pp-liteseg", precision="fp32", median_ms=9.8, seed=9,
                                           task=("segmentation", "miou", 0.723, 0.723), **orin),
    }


def write_demo(out_dir: str | Path, tasks: bool = False) -> list[Path]:
    """The demo fleet's results into ``out_dir``; ``tasks``: with a detector and a segmenter."""
    out = Path(out_dir)
    docs = {**demo_results(), **(task_demo_results() if tasks else {})}
    files = {out / f"{stem}.json": json.dumps(r, indent=2) + "\n" for stem, r in docs.items()}
    write_files_atomic(files)
    return sorted(files)


def calibrate(pairs: int = 300, sizes=(50, 200, 1000), lags=(0.0, 0.5, 0.8, 0.9)) -> list[dict]:
    """How often `compare` calls two runs of one artifact different, and how often it finds +5%/+15%."""
    from edgeforge.report.compare import compare

    rows = []
    for n in sizes:
        for phi in lags:
            fp = naive = slow15 = slow5 = 0
            for s in range(pairs):
                a = make_result(seed=2 * s, n=n, phi=phi)
                same = compare(a, make_result(seed=2 * s + 1, n=n, phi=phi))
                fp += same.significant
                naive += same.p_value_iid < same.alpha
                slow15 += compare(a, make_result(seed=10**6 + s, n=n, phi=phi, median_ms=11.5)).verdict == "slower"
                slow5 += compare(a, make_result(seed=2 * 10**6 + s, n=n, phi=phi, median_ms=10.5)).verdict == "slower"
            rows.append({"samples": n, "lag1": phi, "false_positive": fp / pairs, "raw_mwu_p_lt_alpha": naive / pairs,
                         "detects_15pct": slow15 / pairs, "detects_5pct": slow5 / pairs})
            print(" ".join(f"{k}={v:g}" for k, v in rows[-1].items()), flush=True)
    return rows


if __name__ == "__main__":
    if sys.argv[1:] == ["--calibrate"]:
        calibrate()
    elif len(sys.argv) == 2:
        for p in write_demo(sys.argv[1]):
            print(p)
    else:
        sys.exit("usage: python tests/result_factory.py DIR | --calibrate")


def read_result_doc(path) -> dict:
    """A result file as written (the document's own keys: a field the runner left out stays out),
    after :func:`edgeforge.results.schema.read_result` has validated it against its model."""
    from edgeforge.results.schema import read_result

    read_result(path)
    return json.loads(Path(path).read_text())
