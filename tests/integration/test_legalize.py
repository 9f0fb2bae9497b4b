"""legalize: each rewrite on a small exported model that contains its op.

For every rewrite: Paddle Inference gives the same outputs before and after (bit for bit where
the rewrite is exact), the raw export fails in the frozen Paddle Lite converter or runtime, and
the legalized one converts (and, where the failure was at run time, runs on the x86 Lite
runtime with Paddle Inference's answers). Converter and runtime run in child processes: they
abort or segfault their own process. Plus the pre-flight findings.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ["FLAGS_enable_pir_api"] = "0"

import paddle
import paddle.nn.functional as F
from paddle import nn

from edgeforge.errors import ConfigError
from edgeforge.toolchain import find_lite
from edgeforge.paddle_env import legacy_static
from edgeforge.passes import legalize as L

_OPT = r"""
import sys
import paddlelite.lite as lite
opt = lite.Opt()
opt.set_model_file(sys.argv[1])
opt.set_param_file(sys.argv[2])
opt.set_model_type("naive_buffer")
opt.set_optimize_out(sys.argv[3])
opt.set_valid_places(sys.argv[4])
opt.run()
"""

_LITE_RUN = r"""
import sys
import numpy as np
from paddlelite import lite
cfg = lite.MobileConfig()
cfg.set_model_from_file(sys.argv[1])
pred = lite.create_paddle_predictor(cfg)
pred.get_input(0).from_numpy(np.load(sys.argv[2]))
pred.run()
np.save(sys.argv[3], pred.get_output(0).numpy().copy())  # numpy() is a view: copy
"""


class Probe(nn.Layer):
    """``fn(x, *mods) * w``: the trailing parameter makes sure a .pdiparams file exists."""

    def __init__(self, fn, *mods):
        super().__init__()
        self.mods = nn.LayerList(list(mods))
        self.fn = fn
        self.w = self.create_parameter([1], default_initializer=nn.initializer.Constant(1.5))

    def forward(self, x):
        return self.fn(x, *self.mods) * self.w


def export(layer: nn.Layer, shape: list, path: Path) -> Path:
    paddle.seed(0)
    layer.eval()
    paddle.jit.save(layer, str(path / "model"),
                    input_spec=[paddle.static.InputSpec(list(shape), "float32", "x")])  # copies: it rewrites None in place
    return path


def infer(model_dir: Path, x: np.ndarray) -> list[np.ndarray]:
    from paddle import inference

    cfg = inference.Config(str(model_dir / "model.pdmodel"), str(model_dir / "model.pdiparams"))
    cfg.disable_glog_info()
    pred = inference.create_predictor(cfg)
    handle = pred.get_input_handle(pred.get_input_names()[0])
    handle.reshape(list(x.shape))
    handle.copy_from_cpu(x)
    pred.run()
    return [pred.get_output_handle(n).copy_to_cpu() for n in pred.get_output_names()]


def lite_convert(model_dir: Path, target: str, out: Path) -> tuple[int, str, Path]:
    res = subprocess.run(
        [find_lite().python, "-c", _OPT, str(model_dir / "model.pdmodel"),
         str(model_dir / "model.pdiparams"), str(out), target],
        capture_output=True, text=True, timeout=300, check=False)
    return res.returncode, res.stdout + res.stderr, Path(f"{out}.nb")


def lite_run(nb: Path, x: np.ndarray, tmp: Path) -> tuple[int, str, np.ndarray | None]:
    np.save(tmp / "in.npy", x)
    res = subprocess.run([find_lite().python, "-c", _LITE_RUN, str(nb), str(tmp / "in.npy"),
                          str(tmp / "out.npy")], capture_output=True, text=True, timeout=300,
                         check=False)
    out = np.load(tmp / "out.npy") if res.returncode == 0 else None
    return res.returncode, res.stdout + res.stderr, out


X4 = [1, 8, 8, 8]

# name: (layer factory, input spec shape, raw failure: ("convert", fragment) | ("run", fragment))
CASES = {
    "relu6-threshold": (lambda: Probe(lambda x: F.relu6(x)), X4,
                        ("convert", "No attributes called threshold found for relu6")),
    "swish-beta": (lambda: Probe(lambda x, m: m(x), nn.Swish()), X4,
                   ("convert", "No attributes called beta found for swish")),
    # the alexnet pattern: flatten not directly followed by the matmul (arm crashes too)
    "flatten-to-reshape2": (lambda: Probe(lambda x, c, d, fc: fc(d(paddle.flatten(c(x), 1))),
                                          nn.Conv2D(8, 4, 3), nn.Dropout(0.5, mode="downscale_in_infer"),
                                          nn.Linear(4 * 6 * 6, 5)),
                            [None, 8, 8, 8], ("convert", "")),
    # dynamic trailing dims: no reshape2 shape attribute can express it
    "flatten-xshape": (lambda: Probe(lambda x: paddle.flatten(x, 1, 2)), [1, 8, 8, None],
                       ("convert", "")),
    "instance-norm-saved-stats": (lambda: Probe(lambda x, m: m(x), nn.InstanceNorm2D(8)), X4,
                                  ("convert", "is_dispensable || is_have_output")),
    "brelu-to-clip": (lambda: Probe(lambda x, m: m(x), nn.Hardtanh(-0.5, 0.7)), X4,
                      ("convert", "These unsupported ops are: 'brelu'")),
    "channel-shuffle-to-transpose": (lambda: Probe(lambda x, m: m(x), nn.ChannelShuffle(4)), X4,
                                     ("convert", "These unsupported ops are: 'channel_shuffle'")),
    "fill-constant-0d": (lambda: Probe(lambda x: paddle.where(x > 0, x, x * 0.1)), X4,
                         ("run", "no valid out_shape")),
    "pow2-to-square": (lambda: Probe(lambda x: paddle.pow(x, 2.0)), X4, ("run", "inf")),
}


# ONNX-backend rewrites: name -> (layer factory, input spec shape)
ONNX_CASES = {
    # vgg16's classifier head at a small input: AdaptiveAvgPool2D(7) on a 1x1 feature map
    "upsampling-pool-to-expand": (lambda: Probe(lambda x, p: paddle.flatten(p(x), 1), nn.AdaptiveAvgPool2D(7)),
                                  [None, 8, 1, 1]),
}


def test_every_rewrite_has_a_case():
    assert set(CASES) | set(ONNX_CASES) == {r.name for r in L.REWRITES}
    assert not set(CASES) & set(ONNX_CASES)


def _onnx_run(model: Path, x: np.ndarray, tmp: Path) -> tuple[int, str, np.ndarray | None]:
    """onnxruntime in a child: on the raw export it dies of SIGFPE."""
    np.save(tmp / "onnx_in.npy", x)
    code = ("import sys, numpy as np, onnxruntime as ort\n"
            "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
            "np.save(sys.argv[3], s.run(None, {s.get_inputs()[0].name: np.load(sys.argv[2])})[0])\n")
    res = subprocess.run([sys.executable, "-c", code, str(model), str(tmp / "onnx_in.npy"), str(tmp / "onnx_out.npy")],
                         capture_output=True, text=True, timeout=300, check=False)
    return res.returncode, res.stderr, np.load(tmp / "onnx_out.npy") if res.returncode == 0 else None


@pytest.mark.parametrize("name", sorted(ONNX_CASES))
def test_onnx_rewrite(name, tmp_path):
    """paddle2onnx writes the raw export's pool with strides [0, 0] (onnxruntime would die of
    SIGFPE; convert.onnx refuses such a node: tests/unit/test_onnx_ptq.py); the ONNX-side fix
    (``upsampling-pool-to-resize``, which serves the PIR route) makes it a Resize with Paddle's
    bits. Legalized for the onnx backend, Paddle Inference gives the same bits, and paddle2onnx
    + onnxruntime give Paddle's answers with no converter fix needed."""
    from edgeforge.passes.onnx import paddle2onnx_convert, check_converted

    make, shape = ONNX_CASES[name]
    raw = export(make(), shape, tmp_path / "raw")
    x = np.random.default_rng(0).standard_normal([3 if d is None else d for d in shape]).astype("float32")
    before = infer(raw, x)

    fixes = paddle2onnx_convert(str(raw), str(tmp_path / "raw.onnx"), 13)
    assert {"rewrite": "upsampling-pool-to-resize", "nodes": 1} in fixes
    check_converted("convert.onnx", tmp_path / "raw.onnx")
    rc, log, out = _onnx_run(tmp_path / "raw.onnx", x, tmp_path)
    assert rc == 0, (rc, log[-2000:])
    np.testing.assert_array_equal(out, before[0])

    raw_findings = L.preflight(raw, "onnx", [], after_legalize=False)
    assert [(f.op, f.remedy) for f in raw_findings] == [("pool2d", f"rewrite {name} applies")]
    assert L.preflight(raw, "onnx", []) == []
    assert name in {r.name for r in L.rewrites_for("onnx", [])}
    assert name not in {r.name for r in L.rewrites_for("lite", ["arm", "x86"])}
    fixed = tmp_path / "fixed"
    report = L.legalize_model(raw, fixed, "onnx", [])
    assert report == [{"rewrite": name, "ops": 1}]
    after = infer(fixed, x)
    np.testing.assert_array_equal(after[0], before[0])
    fixes = paddle2onnx_convert(str(fixed), str(tmp_path / "fixed.onnx"), 13)
    assert "upsampling-pool-to-resize" not in {f["rewrite"] for f in fixes}
    check_converted("convert.onnx", tmp_path / "fixed.onnx")
    rc, log, out = _onnx_run(tmp_path / "fixed.onnx", x, tmp_path)
    assert rc == 0, log[-2000:]
    np.testing.assert_array_equal(out, before[0])


@pytest.mark.needs_lite
@pytest.mark.parametrize("name", sorted(CASES))
def test_rewrite(name, tmp_path):
    make, shape, (stage, fragment) = CASES[name]
    rewrite = next(r for r in L.REWRITES if r.name == name)
    targets = ["x86"] if rewrite.valid_targets == frozenset({"x86"}) else ["arm", "x86"]
    raw = export(make(), shape, tmp_path / "raw")
    x = np.random.default_rng(0).standard_normal([2 if d is None else d for d in shape]).astype("float32")
    before = infer(raw, x)

    # the raw export fails where the rewrite says it does
    if stage == "convert":
        rc, log, _ = lite_convert(raw, targets[0], tmp_path / "raw_out")
        assert rc != 0, log[-2000:]
        assert fragment in log, log[-2000:]
    else:
        rc, log, nb = lite_convert(raw, "x86", tmp_path / "raw_out")
        assert rc == 0, log[-2000:]
        rc, log, out = lite_run(nb, x, tmp_path)
        if fragment == "inf":
            assert rc == 0 and not np.isfinite(out).all(), log[-2000:]
        else:
            assert rc != 0 and fragment in log, log[-2000:]

    for target in targets:
        fixed = tmp_path / f"fixed-{target}"
        report = L.legalize_model(raw, fixed, "lite", [target])
        assert {"rewrite": name, "ops": 1} in report, report
        after = infer(fixed, x)
        assert len(after) == len(before)
        for a, b in zip(before, after):
            if rewrite.exact:
                np.testing.assert_array_equal(a, b)
            else:
                np.testing.assert_allclose(b, a, rtol=1e-6, atol=0)
        rc, log, nb = lite_convert(fixed, target, tmp_path / f"fixed-{target}-out")
        assert rc == 0 and nb.is_file(), log[-2000:]
        if target == "x86":
            rc, log, out = lite_run(nb, x, tmp_path)
            assert rc == 0, log[-2000:]
            np.testing.assert_allclose(out.reshape(before[0].shape), before[0], rtol=1e-5,
                                       atol=1e-6 * float(np.abs(before[0]).max()))


def test_legalize_keeps_feeds_fetches_and_copies_untouched_models(tmp_path):
    src = export(Probe(lambda x: F.relu(x)), X4, tmp_path / "plain")
    assert L.legalize_model(src, tmp_path / "out", "lite", ["arm"]) == []
    for f in ("model.pdmodel", "model.pdiparams"):
        assert (tmp_path / "out" / f).read_bytes() == (src / f).read_bytes()
    # the onnx backend needs none of the lite rewrites (paddle2onnx reads relu6 without threshold)
    src = export(Probe(lambda x: F.relu6(x)), X4, tmp_path / "relu6")
    assert [r.name for r in L.rewrites_for("onnx", [])] == ["upsampling-pool-to-expand"]
    assert L.legalize_model(src, tmp_path / "onnx", "onnx", []) == []


def test_flatten_reshape_shape():
    f = L.op_fixes._flatten_reshape_shape
    assert f([1, 4, 6, 6], 1, -1) == [0, 144]
    assert f([-1, 4, 6, 6], 1, 3) == [0, 144]
    assert f([-1, 4, -1, 6], 1, 3) == [0, -1]
    assert f([2, 3, 4, 5, 6], 1, 2) == [0, 12, 5, 6]
    assert f([-1, 3, 4], 0, -1) == [-1]
    assert f([2, 3, -1], 0, 1) is None        # dynamic dim after the range


def test_rewrites_for_targets_and_bad_input():
    arm = {r.name for r in L.rewrites_for("lite", ["arm"])}
    x86 = {r.name for r in L.rewrites_for("lite", ["x86"])}
    assert "pow2-to-square" in x86 and "pow2-to-square" not in arm
    assert {"relu6-threshold", "swish-beta", "flatten-to-reshape2"} <= arm & x86
    with pytest.raises(ConfigError):
        L.rewrites_for("tflite", ["arm"])
    with pytest.raises(ConfigError):
        L.rewrites_for("lite", [])


@pytest.mark.needs_lite
def test_preflight(tmp_path):
    # relu6 + flatten (rewritable), pow(x, 3) (x86 kernel gives inf), celu (no Lite kernel)
    model = export(Probe(lambda x: paddle.flatten(F.celu(paddle.pow(F.relu6(x), 3.0)), 1)), X4,
                   tmp_path / "m")

    before = {f.op: f for f in L.preflight(model, "lite", ["x86"], after_legalize=False)}
    assert before["relu6"].remedy == "rewrite relu6-threshold applies"
    assert before["relu6"].count == 1
    assert "No attributes called threshold" in before["relu6"].reason
    assert before["flatten_contiguous_range"].remedy == "rewrite flatten-to-reshape2 applies"
    assert "pow" in before and "celu" in before

    after = {f.op: f for f in L.preflight(model, "lite", ["x86"])}
    assert set(after) == {"pow", "celu"}
    assert "inf" in after["pow"].reason
    assert after["celu"].remedy == "replace the layer: no converter here takes this op"

    # on arm the pow kernel is not known bad; celu has no arm kernel either
    assert {f.op for f in L.preflight(model, "lite", ["arm"])} == {"celu"}

    # an op Lite lacks but paddle2onnx takes points at the onnx backend
    m2 = export(Probe(lambda x, m: m(x), nn.SELU()), X4, tmp_path / "selu")
    (finding,) = L.preflight(m2, "lite", ["arm"])
    assert (finding.op, finding.remedy) == ("selu", "use the onnx backend")
    assert L.preflight(m2, "onnx", []) == []


@pytest.mark.needs_lite
def test_legalize_after_ptq(tmp_path):
    """PTQ (onnx_format=True) re-saves with clip_extra=True: relu6 loses its threshold again,
    so the quantized model needs legalize too."""
    from paddle.static.quantization import PostTrainingQuantization

    src = export(Probe(lambda x, c, fc: fc(paddle.flatten(F.relu6(c(x)), 1)), nn.Conv2D(8, 4, 3),
                       nn.Linear(4 * 6 * 6, 5)), X4, tmp_path / "raw")
    fixed = tmp_path / "fixed"
    L.legalize_model(src, fixed, "lite", ["arm"])
    rng = np.random.default_rng(0)
    with legacy_static():
        exe = paddle.static.Executor(paddle.CPUPlace())
        ptq = PostTrainingQuantization(
            executor=exe, model_dir=str(fixed), model_filename="model.pdmodel",
            params_filename="model.pdiparams", batch_nums=1, algo="abs_max", onnx_format=True,
            data_loader=lambda: ({"x": rng.standard_normal(X4).astype("float32")} for _ in range(1)))
        ptq.quantize()
        ptq.save_quantized_model(str(tmp_path / "int8"), model_filename="model.pdmodel",
                                 params_filename="model.pdiparams")
    rc, log, _ = lite_convert(tmp_path / "int8", "arm", tmp_path / "int8-out")
    assert rc != 0 and "No attributes called threshold found for relu6" in log, log[-2000:]
    assert L.legalize_model(tmp_path / "int8", tmp_path / "int8-fixed", "lite", ["arm"]) == [
        {"rewrite": "relu6-threshold", "ops": 1}]
    rc, log, nb = lite_convert(tmp_path / "int8-fixed", "arm", tmp_path / "int8-fixed-out")
    assert rc == 0 and nb.is_file(), log[-2000:]
    # on x86 the INT8 kernels are wrong: preflight says keep it in float
    remedies = {f.op: f.remedy for f in L.preflight(tmp_path / "int8-fixed", "lite", ["x86"])}
    assert remedies.get("quantize_linear") == "keep the layer in float", remedies


def test_preflight_names_an_upsampling_pool_no_rewrite_takes(tmp_path):
    """2x2 -> 7x7 is not an integer factor: no rewrite, so pre-flight stops the ONNX build
    before paddle2onnx with what to do; the Lite backend takes the pool."""
    raw = export(Probe(lambda x, p: paddle.flatten(p(x), 1), nn.AdaptiveAvgPool2D(7)), [None, 8, 2, 2],
                 tmp_path / "raw")
    [finding] = L.preflight(raw, "onnx", [])
    assert finding.op == "pool2d" and "stride 0" in finding.reason and "--backend lite" in finding.remedy
    assert all(f.op != "pool2d" for f in L.preflight(raw, "lite", ["arm"]))
    # a shrinking adaptive pool (the usual classifier head) is not flagged, static or dynamic
    for shape in ([None, 8, 9, 9], [None, 8, None, None]):
        ok = export(Probe(lambda x, p: paddle.flatten(p(x), 1), nn.AdaptiveAvgPool2D(3)), shape,
                    tmp_path / f"ok{len(str(shape))}")
        assert L.preflight(ok, "onnx", []) == []
