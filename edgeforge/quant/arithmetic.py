"""Which INT8 arithmetic the host evaluates an ONNX artifact with: one rule, used by the
accuracy budget (quantize.onnx), the calibration search and verify, and stated in the manifest.
The rule is ``contracts.host_arithmetic`` (it asks the target); this module computes it.

onnxruntime's CPU provider fuses a QDQ graph into integer kernels (QLinearConv, QGemm, ...).
On x86 without VNNI their u8 x s8 products go through VPMADDUBSW, whose int16 pair sums
saturate (TOOLCHAIN 15): the digits net with one s8/s8 Gemm left in INT8 gave cosine 0.9831
there, against 0.99993 for the same graph computed as written. That saturation is a property
of the host's CPU, not of the artifact, so:

- where the host runs what the target runs (``contracts.host_can_time``: the target's first
  execution provider is ``CPUExecutionProvider`` on the host's ISA, i.e. linux-x86), the host's
  optimized kernels *are* the target's arithmetic, saturation included: ``host-cpu-kernels``;
- everywhere else (TensorRT and CUDA accumulate exactly in int32; an aarch64 CPU widens before
  adding) the host computes the graph's exact QDQ arithmetic: onnxruntime with graph
  optimizations off, each DequantizeLinear, float operator and QuantizeLinear as written
  (measured identical, 0.0 max difference, to ``onnx.reference``): ``exact-qdq``.

Float artifacts (fp32, fp16) always run with the host's default session.
"""
from __future__ import annotations

from pathlib import Path

HOST_KERNELS = "host-cpu-kernels"
EXACT_QDQ = "exact-qdq"


def predictor(model_path: str | Path, arithmetic: dict | str, threads: int | None = None):
    """A ``run(feeds)`` callable (as ``runner.onnx_predictor``) on the host's CPU provider that
    computes ``arithmetic`` (a ``contracts.host_arithmetic`` record or its kind)."""
    kind = arithmetic["kind"] if isinstance(arithmetic, dict) else arithmetic
    if kind not in (HOST_KERNELS, EXACT_QDQ):
        raise ValueError(f"unknown arithmetic {kind!r}")
    from ..runner import edgeforge_runner as runner

    if kind == HOST_KERNELS:
        return runner.onnx_predictor(model_path, threads=threads, providers=["CPUExecutionProvider"])
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads:
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]

    def run(feeds):
        return [np.asarray(o) for o in sess.run(None, {n: feeds[n] for n in names})]

    run.runtime = {"name": "onnxruntime", "version": ort.__version__, "providers": sess.get_providers(),
                   "graph_optimizations": "disabled (exact QDQ arithmetic)"}
    run.input_names = names
    run.session = sess
    return run
