"""Host latency of ONNX models, measured so that they can be compared: one process, the
sessions timed interleaved (run i of every model before run i + 1 of any), batch 1, with
onnxruntime's intra-op spinning off (``session.intra_op.allow_spinning = 0``).

Why spinning off: with several sessions in one process, each session's thread pool spins after
its run and slows the next session (TOOLCHAIN item 18: 2-3x on a 2-core host, and identical
models ±30 % apart). Why interleaved: the host's load drifts; interleaving puts the same drift
into every model's samples, so their ratio is what it measures.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

RUNS = (60, 600)          # rounds: at least 60, and as many as fit in SECONDS, up to 600
SECONDS = 2.0
WARMUPS = 10
NOTE = "host onnxruntime, batch 1, interleaved in one process, spinning off"


def interleaved(models: dict[str, Path], feeds: dict[str, np.ndarray], runs: int | None = None,
                warmups: int = WARMUPS, threads: int | None = None) -> dict[str, list[float]]:
    """{label: raw latency samples in ms} for each model of ``models`` ({label: path}), timed
    interleaved at batch 1 (the first sample of ``feeds``). The order rotates every round, so
    no model always runs right after the same one. ``runs=None``: rounds as :data:`RUNS` and
    :data:`SECONDS` say (fast models get more samples, so compare can tell them apart)."""
    from ..runner.predictors import onnx_predictor

    one = {k: np.ascontiguousarray(v[:1]) for k, v in feeds.items()}
    runners = {label: onnx_predictor(path, threads=threads, spinning=False) for label, path in models.items()}
    t0 = time.perf_counter()
    for _ in range(warmups):
        for run in runners.values():
            run(one)
    if runs is None:
        per_round = (time.perf_counter() - t0) / max(warmups, 1)
        runs = int(min(max(SECONDS / max(per_round, 1e-6), RUNS[0]), RUNS[1]))
    labels = list(runners)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    for i in range(runs):
        k = i % len(labels)
        for label in labels[k:] + labels[:k]:
            t0 = time.perf_counter()
            runners[label](one)
            samples[label].append((time.perf_counter() - t0) * 1e3)
    return samples


def p50(samples: list[float]) -> float:
    return float(np.median(samples))
