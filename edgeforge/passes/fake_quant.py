"""Fake quantization that simulates the INT8 graph onnxruntime ships (the child's side of
``quantize.qat`` on the ONNX backend).

PaddleSlim's dygraph QAT fake-quantizes the inputs of Conv2D and Linear layers with symmetric
moving-average scales, and its scales are dropped at export. What ships is different:
onnxruntime's QDQ graph quantizes every Conv/MatMul/Gemm input *and output* (a following
Relu or Clip folds into the output's range), asymmetric uint8 on x86, symmetric int8 for
TensorRT, with the ranges that calibration measured. A fine-tune against another quantizer's
noise does not make the shipped graph robust (measured: docs/qat.md).

So this module fake-quantizes exactly those tensors, with the target's scheme:

- each Conv2D / Linear input: the scheme's activation grid, range learned (initialised from
  the calibration data's min/max, as onnxruntime's MinMax calibration; zero always inside);
- each Conv2D / Linear weight: per output channel, symmetric, from its own abs-max;
- each Conv2D / Linear output: if an activation layer (ReLU, ReLU6) reads it
  directly, that activation's output instead (onnxruntime folds the activation into an
  asymmetric range: its range starts at 0 and a ReLU6's ends at 6 at most); otherwise, and
  with symmetric schemes (which keep the activation), the output itself.

Ranges learn by the straight-through estimator (LSQ-style: the clipped values carry the
gradient of the range). After the fine-tune, :func:`learned_ranges` gives each fake-quantized
tensor's range in the order the model computes them, which the parent maps onto the ONNX graph.

Runs in a child process: the user's model code does.
"""
from __future__ import annotations

from dataclasses import dataclass

ACTIVATIONS = ("ReLU", "ReLU6")          # outputs >= 0: onnxruntime folds them into the range
CEILINGS = {"ReLU6": 6.0}                # a folded Clip's max: the range never passes it


@dataclass(frozen=True)
class Grid:
    """An integer grid: activations (qmin, qmax, symmetric) and weights (wmax)."""
    qmin: int
    qmax: int
    symmetric: bool
    wmax: int

    @classmethod
    def from_scheme(cls, activations: str, symmetric: bool, reduce_range: bool) -> "Grid":
        # onnxruntime's get_qmin_qmax_for_qType (symmetric int8: -127..127; reduce_range: 7 bits)
        if activations == "uint8":
            qmin, qmax = (0, 127) if reduce_range else (0, 255)
        else:
            qmin, qmax = (-64, 64) if reduce_range else ((-127, 127) if symmetric else (-128, 127))
        return cls(qmin, qmax, symmetric, 64 if reduce_range else 127)


def _ste_round(paddle, v):
    """Round half to even, as onnxruntime's QuantizeLinear (paddle.round rounds half away from
    zero); the gradient passes straight through."""
    r = paddle.round(v)
    tie = paddle.abs(v - paddle.trunc(v)) == 0.5
    r = paddle.where(tie, 2 * paddle.round(v / 2), r)
    return v + (r - v).detach()


def fake_quant(paddle, x, lo, hi, grid: Grid):
    """``x`` on onnxruntime's grid for the range [lo, hi] (zero included, as its calibration)."""
    lo = paddle.minimum(lo, paddle.zeros_like(lo))
    hi = paddle.maximum(hi, paddle.zeros_like(hi))
    if grid.symmetric:
        m = paddle.maximum(paddle.maximum(-lo, hi), paddle.full_like(hi, 1e-8))
        scale = 2 * m / (grid.qmax - grid.qmin)
        zero = paddle.zeros_like(scale)
    else:
        scale = paddle.maximum((hi - lo) / (grid.qmax - grid.qmin), paddle.full_like(hi, 1e-8))
        zero = paddle.clip(paddle.round(grid.qmin - lo / scale), grid.qmin, grid.qmax).detach()
    q = paddle.clip(_ste_round(paddle, x / scale) + zero, grid.qmin, grid.qmax)
    return (q - zero) * scale


def fake_quant_weight(paddle, w, grid: Grid, axis: int):
    """Per-channel symmetric weights along ``axis`` (0: Conv2D's output channels; 1: Linear's)."""
    dims = [d for d in range(w.ndim) if d != axis]
    m = paddle.maximum(paddle.amax(paddle.abs(w), axis=dims, keepdim=True), paddle.full([1], 1e-8))
    scale = (m / grid.wmax).detach()
    return paddle.clip(_ste_round(paddle, w / scale), -grid.wmax, grid.wmax) * scale


class Simulator:
    """Fake quantization put into a (batch-norm folded) dygraph model, in place."""

    def __init__(self, paddle, model, grid: Grid, probe: list):
        self.paddle, self.model, self.grid = paddle, model, grid
        self.kernels = [m for m in model.sublayers()
                        if isinstance(m, (paddle.nn.Conv2D, paddle.nn.Linear))]
        self.order: list[tuple[object, str]] = []     # (layer, "in"|"out") in compute order
        self.kernel_order: list = []                  # the kernels in compute order
        self.ranges: dict[tuple[int, str], object] = {}
        self.aliases: set[tuple[int, str]] = set()   # kernel inputs already quantized upstream
        self.shared: dict[tuple[int, str], tuple[int, str]] = {}   # an input another kernel reads too
        self._fused_act = self._find_fused(probe)
        self._acts = {id(a) for a in self._fused_act.values()}
        self._upstream = self._find_upstream([t[:8] for t in probe])
        self._ceiling = {id(a): CEILINGS[type(a).__name__] for a in self._fused_act.values()
                         if type(a).__name__ in CEILINGS}
        # symmetric schemes keep the Relu/Clip (onnxruntime folds it only into an asymmetric
        # range): the kernel's output is quantized too
        self._folds = not grid.symmetric
        self._calibrate(probe)
        for k in self.kernels:
            k.forward = self._kernel_forward(k)
        for act in self._fused_act.values():
            act.register_forward_post_hook(self._act_hook)
        for kid, layer in self._upstream.items():
            key = self.shared.get((kid, "in"), (kid, "in"))
            if key in self.ranges:
                layer.register_forward_post_hook(self._upstream_hook(key))

    def parameters(self) -> list:
        """What trains besides the model's own parameters: the activation ranges."""
        return list(self.ranges.values())

    def _find_fused(self, probe: list) -> dict:
        """kernel id -> the activation layer that reads its output directly."""
        paddle = self.paddle
        acts = [m for m in self.model.sublayers() if type(m).__name__ in ACTIVATIONS]
        outs: dict[int, object] = {}
        fused: dict[int, object] = {}
        hooks = [k.register_forward_post_hook(lambda layer, i, o: outs.__setitem__(id(o), layer))
                 for k in self.kernels]
        hooks += [a.register_forward_pre_hook(
            lambda layer, i: fused.__setitem__(id(outs[id(i[0])]), layer) if id(i[0]) in outs else None)
            for a in acts]
        with paddle.no_grad():
            self.model(*probe)
        for h in hooks:
            h.remove()
        return fused

    def _find_upstream(self, probe: list) -> dict:
        """kernel id -> the layer (not a kernel, not a folded activation) whose output the kernel
        reads, as a residual block's sum. onnxruntime quantizes that tensor once, for every
        reader: the residual Add that also reads it reads the quantized values. So its range
        is applied where it is produced, not inside the kernel."""
        paddle = self.paddle
        skip = {id(k) for k in self.kernels} | self._acts
        made: dict[int, tuple] = {}          # id -> (the output, held so ids stay unique; its layer)
        found: dict[int, object] = {}

        def post(layer, inputs, out):
            if isinstance(out, paddle.Tensor) and id(out) not in made:
                made[id(out)] = (out, layer)  # the innermost layer that returns it

        def pre(layer, inputs):
            hit = made.get(id(inputs[0]))
            if hit is not None:
                found[id(layer)] = hit[1]

        others = [m for m in self.model.sublayers() if id(m) not in skip]
        hooks = [m.register_forward_post_hook(post) for m in others]
        hooks += [k.register_forward_post_hook(lambda layer, i, o: made.__setitem__(id(o), (o, None)))
                  for k in self.kernels]
        hooks += [a.register_forward_post_hook(lambda layer, i, o: made.__setitem__(id(o), (o, None)))
                  for a in self._fused_act.values()]
        hooks += [k.register_forward_pre_hook(pre) for k in self.kernels]
        with paddle.no_grad():
            self.model(*probe)
        for h in hooks:
            h.remove()
        return {kid: layer for kid, layer in found.items() if layer is not None}

    def _upstream_hook(self, key):
        def hook(layer, inputs, out):
            r = self.ranges[key]
            return fake_quant(self.paddle, out, r[0], r[1], self.grid)
        return hook

    def _calibrate(self, probe: list) -> None:
        """Min/max of every tensor to be fake-quantized, on the calibration data (float model)."""
        paddle = self.paddle
        seen: dict[tuple[int, str], list[float]] = {}
        order = self.order
        produced: dict[int, object] = {}     # id -> a quantized output (held, so ids stay unique)
        read: dict[int, tuple] = {}          # id -> (a kernel input, its range's key)

        def note(layer, where, t):
            key = (id(layer), where)
            if where == "in" and id(t) in produced:
                self.aliases.add(key)        # one tensor, one range: onnxruntime quantizes it once
                return
            if where == "in" and id(t) in read:
                self.shared[key] = read[id(t)][1]     # two kernels read it: they share its range
                return
            if where == "in":
                read[id(t)] = (t, key)
            if where == "out":
                produced[id(t)] = t
            lo, hi = float(paddle.min(t)), float(paddle.max(t))
            if key not in seen:
                seen[key] = [lo, hi]
                order.append((layer, where))
            else:
                seen[key] = [min(seen[key][0], lo), max(seen[key][1], hi)]

        def kpre(layer, inputs):
            if all(k is not layer for k in self.kernel_order):
                self.kernel_order.append(layer)
            note(layer, "in", inputs[0])

        def kpost(layer, inputs, out):
            if id(layer) not in self._fused_act or not self._folds:
                note(layer, "out", out)

        def apost(layer, inputs, out):
            note(layer, "out", out)

        hooks = [k.register_forward_pre_hook(kpre) for k in self.kernels]
        hooks += [k.register_forward_post_hook(kpost) for k in self.kernels]
        hooks += [a.register_forward_post_hook(apost) for a in self._fused_act.values()]
        with paddle.no_grad():
            self.model(*probe)
        for h in hooks:
            h.remove()
        for key, (lo, hi) in seen.items():
            p = paddle.create_parameter([2], "float32", default_initializer=paddle.nn.initializer.Assign(
                [min(lo, 0.0), max(hi, 0.0)]))
            self.ranges[key] = p

    def _q(self, layer, where, t):
        key = (id(layer), where)
        r = self.ranges.get(self.shared.get(key, key))
        if r is None:
            return t
        # an activation's output is >= 0: its range starts at 0, so the zero point is the grid's
        # minimum and onnxruntime folds the Relu/Clip into it (a range below 0 keeps it apart
        # and, measured on shufflenet_v2, costs cosine 0.976 -> 0.935)
        lo = self.paddle.zeros_like(r[0]) if id(layer) in self._acts else r[0]
        # a folded Clip(0, 6) is gone from the graph: a range past 6 would let values past 6 through
        hi = self.paddle.minimum(r[1], self.paddle.full_like(r[1], self._ceiling[id(layer)])) \
            if id(layer) in self._ceiling else r[1]
        return fake_quant(self.paddle, t, lo, hi, self.grid)

    def _kernel_forward(self, k):
        F = self.paddle.nn.functional
        conv = isinstance(k, self.paddle.nn.Conv2D)

        def forward(x):
            if id(k) not in self._upstream:      # else quantized where it was produced
                x = self._q(k, "in", x)
            w = fake_quant_weight(self.paddle, k.weight, self.grid, 0 if conv else 1)
            if conv:
                y = F.conv2d(x, w, k.bias, k._stride, k._padding, k._dilation, k._groups, k._data_format)
            else:
                y = F.linear(x, w, k.bias)
            return y if id(k) in self._fused_act and self._folds else self._q(k, "out", y)
        return forward

    def _act_hook(self, layer, inputs, out):
        return self._q(layer, "out", out)

    def kernel_signatures(self) -> list[dict]:
        """The kernels in compute order: kind, weight shape and the weights' sum and sum of
        squares (what the parent finds the ONNX graph's Conv/Gemm/MatMul nodes by). Call it
        after the fine-tune: the weights are those that get exported."""
        import numpy as np

        conv = self.paddle.nn.Conv2D
        out = []
        for k in self.kernel_order:
            w = k.weight.numpy().astype("float64")
            out.append({"kind": "conv" if isinstance(k, conv) else "linear", "shape": list(w.shape),
                        "sum": float(w.sum()), "sumsq": float(np.square(w).sum())})
        return out

    def learned_ranges(self) -> list[dict]:
        """Every fake-quantized tensor, in compute order: the kernel's index in compute order,
        "in" or "out", whether the range is a folded activation's, and [lo, hi]."""
        index = {id(k): i for i, k in enumerate(self.kernel_order)}
        owner = {id(a): kid for kid, a in self._fused_act.items()}
        out = []
        for layer, where in self.order:
            lo, hi = (float(v) for v in self.ranges[(id(layer), where)].numpy())
            kid = owner.get(id(layer), id(layer))
            if kid not in index:
                continue
            act = id(layer) in owner
            hi = min(hi, self._ceiling.get(id(layer), hi))
            out.append({"kernel": index[kid], "where": where, "fused_activation": act,
                        "range": [0.0 if act else min(lo, 0.0), max(hi, 0.0)]})
        return out
