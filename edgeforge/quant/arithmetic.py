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

import functools
from pathlib import Path

HOST_KERNELS = "host-cpu-kernels"
EXACT_QDQ = "exact-qdq"


def predictor(model_path: str | Path, arithmetic: dict | str, threads: int | None = None):
    """A ``run(feeds)`` callable (as ``onnx_predictor``) on the host's CPU provider that
    computes ``arithmetic`` (a ``contracts.host_arithmetic`` record or its kind)."""
    kind = arithmetic["kind"] if isinstance(arithmetic, dict) else arithmetic
    if kind not in (HOST_KERNELS, EXACT_QDQ):
        raise ValueError(f"unknown arithmetic {kind!r}")
    from ..runner.predictors import onnx_predictor

    if kind == HOST_KERNELS:
        return onnx_predictor(model_path, threads=threads, providers=["CPUExecutionProvider"])
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


# (input channels, output channels) of the probe convs: onnxruntime 1.23's fused QLinearConv
# miscomputes the output channels past the last multiple of 16 for these on CPUs with
# AVX512-VNNI and AMX-INT8 (measured on an Intel Xeon with AMX; onnxruntime#26324): shufflenet's
# first conv (3 -> 24) and its 58-channel branches. 1.20.1 and CPUs without VNNI compute them right.
PROBE_CONVS = ((3, 24), (16, 58))


def _probe_model(path: Path, cin: int, cout: int, seed: int) -> None:
    """x -> Q/DQ (uint8) -> Conv 3x3 (per-channel int8 weights, int32 bias) -> Q/DQ: the
    graph quantize.onnx writes for linux-x86."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    ws = (rng.uniform(0.5, 2.0, cout) * 0.01).astype(np.float32)
    arrays = {"xs": np.float32(0.02), "xz": np.uint8(128), "w": rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8),
              "ws": ws, "wz": np.zeros(cout, np.int8), "b": rng.integers(-500, 500, cout).astype(np.int32),
              "bs": (0.02 * ws).astype(np.float32), "bz": np.zeros(cout, np.int32),
              "ys": np.float32(0.05), "yz": np.uint8(128)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "kernel_probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, cin, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


@functools.lru_cache(maxsize=1)
def kernel_probe() -> dict:
    """Do this host's onnxruntime INT8 CPU kernels compute what a QDQ conv graph says?
    ``{"sound": bool, "wrong": [(cin, cout, share of outputs off by more than one step)],
    "onnxruntime": version}``. Runs :data:`PROBE_CONVS` once per process (~0.1 s)."""
    import tempfile

    import numpy as np
    import onnxruntime as ort

    wrong = []
    with tempfile.TemporaryDirectory(prefix="edgeforge-probe-") as tmp:
        for i, (cin, cout) in enumerate(PROBE_CONVS):
            path = Path(tmp) / f"probe{i}.onnx"
            _probe_model(path, cin, cout, seed=i)
            x = np.random.default_rng(10 + i).uniform(-2.0, 2.0, (2, cin, 16, 16)).astype(np.float32)
            fused = predictor(path, HOST_KERNELS, threads=1)({"x": x})[0]
            exact = predictor(path, EXACT_QDQ, threads=1)({"x": x})[0]
            off = float(np.mean(np.abs(fused - exact) > 0.05 * 1.01))       # 0.05: the output's step
            if off > 0:
                wrong.append((cin, cout, round(off, 4)))
    return {"sound": not wrong, "wrong": wrong, "onnxruntime": ort.__version__}
