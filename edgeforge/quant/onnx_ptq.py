"""KL (entropy) calibration for onnxruntime's static quantizer, with Paddle's threshold search.

onnxruntime's ``CalibrationMethod.Entropy`` defaults to 128 histogram bins and 128 quantized
bins, so its search has a single candidate: the full range, i.e. plain min/max. edgeforge
collects a fine (4096-bin) histogram with onnxruntime's own calibrator, folds it to |x|
(2048 bins, as Paddle and TensorRT do), and picks the clipping threshold with Paddle's KL search
(vectorised in ``edgeforge.quant.kl``), with two corrections measured on five trained
paddle.vision networks (docs/cost.md, "KL calibration"):

* **The zero spike is left out of the search.** Half of a ReLU output is exactly 0, which every
  scale represents exactly; in the histogram's first bin that spike is spread over Q's first
  block, a divergence that shrinks with the threshold and so pulled KL down to ~0.62 of the
  range on every ReLU6 tensor of MobileNetV2 (cosine 0.9305 -> 0.9523 without it).
* **Never below the least-squares threshold.** KL weighs the shape of the clipped distribution,
  not how far the clipped values move; where it clips harder than the threshold minimising the
  expected squared error, that threshold is taken (MobileNetV2 0.9523 -> 0.9818, onnxruntime's
  Entropy 0.9796). A far tail is still clipped where clipping it costs less squared error than
  the resolution it buys.

onnxruntime then writes the QDQ model as usual.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from .kl import cal_kl_threshold_fast

HIST_BINS = 4096      # signed histogram over [-t, t]; folded to 2048 bins of |x|


@dataclass
class QuantRun:
    """What one run of quantize.onnx works out, kept in the run, never on the pass: the target
    runtime's INT8 scheme, the calibration batches, the tensor ranges by (op set, algo) that
    calibration reads from the float model once, and the tensors the histograms could not bin
    (tensor -> why, quant/degenerate.py)."""
    scheme: Any
    batches: list
    ranges: dict = field(default_factory=dict)
    degenerate: dict = field(default_factory=dict)


def mse_threshold(folded: np.ndarray, bin_width: float, bits: int = 8, candidates: int = 256) -> float:
    """Threshold minimising the expected squared error of clip-and-round quantization of |x|,
    evaluated on the histogram for ``candidates`` thresholds at once (Paddle's ``mse`` idea)."""
    centers = (np.arange(folded.size) + 0.5) * bin_width
    weights = folded.astype(np.float64)
    levels = 2 ** (bits - 1) - 1
    ts = np.linspace(bin_width * 4, folded.size * bin_width, candidates)
    step = ts / levels                                                 # (C,)
    q = np.clip(np.round(centers[None, :] / step[:, None]), 0, levels) * step[:, None]
    err = ((centers[None, :] - q) ** 2 * weights[None, :]).sum(1)
    return float(ts[int(np.argmin(err))])


def kl_range(hist: np.ndarray, edges: np.ndarray, lo: float, hi: float, bits: int = 8,
             criterion: str = "kl") -> tuple[float, float]:
    """Clip range for one tensor from a signed, symmetric histogram (onnxruntime's layout)."""
    hist = np.asarray(hist, dtype=np.int64)
    n = hist.size
    half = n // 2
    folded = hist[half:].copy()
    folded[: half] += hist[:half][::-1]
    amax = float(edges[-1])
    if amax <= 0 or folded.sum() == 0:
        return float(lo), float(hi)
    width = amax / folded.size
    least_squares = mse_threshold(folded, width, bits)
    if criterion == "mse":
        threshold = least_squares
    else:
        searched = folded.copy()
        if searched.size > 1:        # the exact zeros (a ReLU's half) quantize exactly at any scale
            searched[0] = min(searched[0], searched[1])
        threshold = max(float(cal_kl_threshold_fast(searched, width, bits)), least_squares)
    return max(float(lo), -threshold), min(float(hi), threshold)


def _kl_calibrater_class(criterion: str = "kl"):
    from onnxruntime.quantization.calibrate import (CalibrationMethod, HistogramCalibrater, TensorData,
                                                    TensorsData)

    class KLCalibrater(HistogramCalibrater):
        def __init__(self, model_path, op_types_to_calibrate=None, augmented_model_path="augmented_model.onnx",
                     use_external_data_format=False, symmetric=False):
            super().__init__(model_path, op_types_to_calibrate, augmented_model_path, use_external_data_format,
                             method="entropy", symmetric=symmetric, num_bins=HIST_BINS, num_quantized_bins=128)

        def compute_data(self):
            if not self.collector:
                raise ValueError("no calibration data collected")
            # The model's own outputs are what the user reads: never clip them.
            # (augment_graph makes every calibrated tensor a graph output: ask for the original ones)
            graph_outputs = set(self.model_original_outputs)
            out = {}
            for name, (hist, edges, lo, hi, _thr) in self.collector.histogram_dict.items():
                dtype = np.asarray(edges).dtype
                # asymmetric uint8 over [0, t] has 255 levels where Paddle's search assumes 127 (signed,
                # symmetric): judged with 127, KL clipped a trained MobileNetV2 to cosine 0.909, with 255 to 0.926
                bits = 9 if not self.symmetric and float(lo) >= 0 else 8
                a, b = (lo, hi) if name in graph_outputs else kl_range(hist, edges, lo, hi, bits, criterion)
                out[name] = TensorData(lowest=np.array(a, dtype=dtype), highest=np.array(b, dtype=dtype),
                                       hist=hist, bins=edges)
            return TensorsData(CalibrationMethod.Entropy, out)

    return KLCalibrater


@contextlib.contextmanager
def paddle_kl_entropy(criterion: str = "kl") -> Iterator[None]:
    """Within this block, ``quantize_static(..., calibrate_method=Entropy)`` uses edgeforge's
    histogram thresholds: Paddle's KL search (``criterion="kl"``) or least squares (``"mse"``)."""
    import importlib

    q = importlib.import_module("onnxruntime.quantization.quantize")   # the module, not the function
    from onnxruntime.quantization.calibrate import CalibrationMethod

    original = q.create_calibrator
    cls = _kl_calibrater_class(criterion)

    def create_calibrator(model, op_types_to_calibrate=None, augmented_model_path="augmented_model.onnx",
                          calibrate_method=CalibrationMethod.MinMax, use_external_data_format=False,
                          providers=None, extra_options=None):
        if calibrate_method != CalibrationMethod.Entropy:
            return original(model, op_types_to_calibrate, augmented_model_path, calibrate_method,
                            use_external_data_format, providers, extra_options or {})
        cal = cls(model, op_types_to_calibrate, augmented_model_path, use_external_data_format,
                  symmetric=(extra_options or {}).get("symmetric", False))
        cal.augment_graph()
        if providers:
            cal.execution_providers = providers
        cal.create_inference_session()
        return cal

    q.create_calibrator = create_calibrator
    try:
        yield
    finally:
        q.create_calibrator = original


@contextlib.contextmanager
def reuse_calibration(cache: dict, key) -> Iterator[None]:
    """Within this block, ``quantize_static`` calibrates once per ``key`` and reuses the tensor
    ranges afterwards. Calibration runs the float model only, so its ranges do not depend on
    ``nodes_to_exclude``: the accuracy-budget rounds then cost a QDQ rewrite, not a calibration."""
    import importlib

    q = importlib.import_module("onnxruntime.quantization.quantize")
    current = q.create_calibrator

    class Cached:
        def __init__(self, data):
            self.data = data

        def collect_data(self, _reader):
            pass

        def compute_data(self):
            return self.data

    class Recording:
        def __init__(self, inner):
            self.inner = inner

        def collect_data(self, reader):
            self.inner.collect_data(reader)

        def compute_data(self):
            cache[key] = self.inner.compute_data()
            return cache[key]

    def create_calibrator(*args, **kwargs):
        if key in cache:
            return Cached(cache[key])
        return Recording(current(*args, **kwargs))

    q.create_calibrator = create_calibrator
    try:
        yield
    finally:
        q.create_calibrator = current


def scheme_options(scheme) -> dict:
    """``quantize_static`` keyword arguments that write ``scheme`` (a ``targets.QuantScheme``)."""
    from onnxruntime.quantization import QuantType

    qt = {"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}
    return {"activation_type": qt[scheme.activations], "weight_type": qt[scheme.weights],
            "reduce_range": scheme.reduce_range,
            "extra_options": {"ActivationSymmetric": scheme.symmetric_activations,
                              "WeightSymmetric": scheme.symmetric_weights,
                              "QuantizeBias": scheme.quantize_bias,
                              "QDQOpTypePerChannelSupportToAxis": {"Conv": scheme.per_channel_axis}}}


FOLDABLE_ACTIVATIONS = ("Relu", "Clip")   # onnxruntime's QDQRemovableActivation folds these


def float_inputs(pre_path, qdq_path, keep) -> int:
    """Give the ``keep`` nodes of a QDQ model float inputs, in place; returns how many inputs
    were rewired.

    ``nodes_to_exclude`` only keeps a node's weights in float: onnxruntime still quantizes the
    activation that reaches it, because the producer (a quantized Conv quantizes its output) or
    another consumer asks for it. On sensitive nets that input quantization is the damage, so a
    budget that excludes nodes alone ends up excluding nearly every layer (measured on
    mobilenet_v2: 52 of 53). Paddle's PTQ, by contrast, skips a layer's input fake-quant with it.
    This reads each kept node's activation input past its QuantizeLinear -> DequantizeLinear pair.
    Where the quantizer folded a Relu/Clip into the quantization range (renaming the upstream
    output), a copy of the original activation node is put back on the float path."""
    import onnx
    from onnxruntime.quantization.onnx_model import ONNXModel

    keep = set(keep)
    if not keep:
        return 0
    pre = onnx.load(str(pre_path))
    model = onnx.load(str(qdq_path))
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    pre_producer = {o: n for n in pre.graph.node for o in n.output}
    pre_inits = {i.name: i for i in pre.graph.initializer}
    have = {i.name for i in g.initializer} | {o for n in g.node for o in n.output} | {i.name for i in g.input}
    restored: dict[str, str] = {}
    rewired = 0
    new_nodes = []
    for node in g.node:
        if node.name not in keep:
            continue
        for k, name in enumerate(node.input):
            dq = producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            q = producer.get(dq.input[0])
            if q is None or q.op_type != "QuantizeLinear":
                continue                      # a quantized initializer (weight), not an activation
            src = q.input[0]
            before, now = pre_producer.get(src), producer.get(src)
            if (before is not None and before.op_type in FOLDABLE_ACTIVATIONS
                    and (now is None or now.op_type != before.op_type)):
                if src not in restored:
                    act = onnx.NodeProto()
                    act.CopyFrom(before)
                    act.name = f"{before.name or src}_edgeforge_float"
                    act.input[0] = src
                    act.output[0] = f"{src}_edgeforge_float"
                    for extra in act.input[1:]:       # Clip's min/max
                        if extra and extra not in have:
                            if extra not in pre_inits:
                                raise ValueError(f"cannot restore {before.op_type} {before.name!r}: input {extra!r}")
                            g.initializer.append(pre_inits[extra])
                            have.add(extra)
                    new_nodes.append(act)
                    restored[src] = act.output[0]
                src = restored[src]
            node.input[k] = src
            rewired += 1
    g.node.extend(new_nodes)
    # Q/DQ pairs nobody reads any more
    while True:
        used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
        dead = [n for n in g.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                and not any(o in used for o in n.output)]
        if not dead:
            break
        for n in dead:
            g.node.remove(n)
    wrapped = ONNXModel(model)
    wrapped.clean_initializers()      # the dropped pairs' scales and zero points
    wrapped.topological_sort()        # restored activations were appended at the end
    onnx.save(model, str(qdq_path))
    return rewired



def pre_process(src, dst) -> dict:
    """onnxruntime's documented pre-processing (TOOLCHAIN trap 8), surviving graphs its symbolic
    shape inference cannot finish (e.g. a UNet's bilinear Resize after a ConvTranspose:
    "Incomplete symbolic shape inference"): retried with ``auto_merge`` (merge conflicting
    symbolic dims), then with the symbolic pass skipped (onnx's own shape inference only).
    Returns what ran, for the manifest: ``{"symbolic_shape": "ok"|"auto_merge"|"skipped", ...}``."""
    import os
    import tempfile

    import onnxruntime as ort
    from onnxruntime.quantization.shape_inference import quant_pre_process

    tries = [("ok", {}), ("auto_merge", {"auto_merge": True}), ("skipped", {"skip_symbolic_shape": True})]
    errors: list[str] = []
    src, dst = os.path.abspath(src), os.path.abspath(dst)
    for mode, kwargs in tries:
        try:
            # onnxruntime's symbolic pass saves "sym_shape_infer_temp.onnx" (+ external data) in the
            # working directory when it gives up: run it where that lands in a throw-away folder,
            # never in the user's directory
            with tempfile.TemporaryDirectory(prefix="edgeforge-shape-") as scratch:
                here = os.getcwd()
                os.chdir(scratch)
                # its optimizing session folds shape constants and warns about each initializer
                # left unread (paddle2onnx 2.1 PIR models: p2o.pd_op.full_int_array.*): errors only
                ort.set_default_logger_severity(3)
                try:
                    quant_pre_process(src, dst, **kwargs)
                finally:
                    ort.set_default_logger_severity(2)
                    os.chdir(here)
        except Exception as exc:  # the next try, or raise the last
            errors.append(f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}")
            if mode == "skipped":
                raise
            continue
        info = {"symbolic_shape": mode, "shape_inference": "onnx" if mode == "skipped" else "onnxruntime symbolic"}
        if errors:
            info["symbolic_errors"] = errors
        return info
    raise AssertionError("unreachable")


# the op types with INT8 kernels: what attention and NMS graphs, the budget's second fit and QAT quantize
INT8_KERNEL_OP_TYPES = ["Conv", "ConvTranspose", "MatMul", "Gemm"]


def op_types_to_quantize(model_path) -> list[str] | None:
    """Which op types onnxruntime quantizes (None: all it supports, its default).

    A graph with a Softmax (attention) gets only the ops with INT8 kernels: Conv,
    ConvTranspose, MatMul (the attention products too) and Gemm. Quantizing everything puts
    Q/DQ pairs inside paddle2onnx's decomposed LayerNorm (ReduceMean, Sub, Pow, Sqrt, Div) and
    GELU (Div, Erf, Mul, Add), around Softmax and every residual Add: measured on the zoo's
    vit_tiny (min/max calibration, onnxruntime 1.23 CPU, batch 1): cosine 0.99926 and p50
    0.80 ms against 0.99951 and 0.30 ms with the four (float: 0.28 ms); docs/export.md.

    A graph with NMS in it (``NonMaxSuppression``) gets the same four: onnxruntime calibrates
    the inputs and outputs of every op type it quantizes, and after NMS they change shape from
    batch to batch (its calibrator stacks them: "inhomogeneous shape"). CNN graphs keep
    onnxruntime's default, as before."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    narrow = any(n.op_type in ("Softmax", "NonMaxSuppression") for n in graph.node)
    return list(INT8_KERNEL_OP_TYPES) if narrow else None
