"""Shared by the zoo suite's conftest and tests: the architectures, the columns, the cell
records and the table (docs/conformance.md)."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ["FLAGS_enable_pir_api"] = "0"
REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:          # benchmarks/ is not a package on the test path
    sys.path.insert(0, str(REPO))
TABLE = REPO / "docs" / "conformance.md"

ARCHS = [
    "resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "vgg16", "mobilenet_v1",
    "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "densenet121", "alexnet",
    "inception_v3", "squeezenet1_0", "squeezenet1_1", "googlenet", "shufflenet_v2_x1_0",
    "shufflenet_v2_swish",
]
# key -> (table heading, api.build arguments)
COLUMNS = {
    "lite-arm-fp32": ("Lite arm fp32", dict(target="rpi4", precision="fp32")),
    "lite-arm-int8": ("Lite arm int8", dict(target="rpi4", float_fallback=False)),
    "lite-x86-fp32": ("Lite x86 fp32", dict(target="linux-x86", backend="lite", precision="fp32")),
    "onnx-fp32": ("ONNX fp32", dict(target="linux-x86", precision="fp32")),
    "onnx-int8": ("ONNX int8", dict(target="linux-x86", float_fallback=False)),
}
CALIBRATION_CROPS = 16     # one batch (the targets' batch_size is 32)
EVALUATION_CROPS = 8
FLOAT_REL_TOL = 1e-4
MIN_COSINE = 0.99
NOISE_REL = 0.01           # the float model's own sensitivity: input noise, relative to its std
INT8_MISS_NOTES = {
    "chaotic": "INT8 cosine below 0.99 on the random-weight test model, which amplifies any small "
               "perturbation (last column): a property of the model, not an upstream limitation or an "
               "edgeforge bug; see \"INT8 on random weights\".",
    "kl": "INT8 cosine below 0.99 with Paddle PTQ's KL thresholds (rpi4's default algorithm; Paddle's "
          "reference KL search gives the same 0.9867 as edgeforge's fast one), while the float model is "
          "stable (last column) and `--calibration hist`, `avg` or `abs_max` give 0.9986-0.9988 (checked "
          "once); see \"INT8 on random weights\".",
}


def input_size(arch: str) -> int:
    return 299 if arch == "inception_v3" else 224


@dataclass
class Cell:
    ok: bool
    figure: str                      # what the table shows after the mark
    note: str | None = None          # a footnote (upstream limitation, failure reason)
    limit: bool = False              # an upstream limitation, and edgeforge failed cleanly
    seconds: float | None = None
    cosine: float | None = None      # INT8 cells: the figure the criterion is applied to
    expected_miss: bool = False      # a listed INT8 cosine miss of a random-weight model (xfail)


@dataclass
class ZooProject:
    arch: str
    root: Path
    cache: Path
    builds: Path
    size: int
    extras: dict = field(default_factory=dict)


RESULTS: dict[tuple[str, str], Cell] = {}
EXTRA_ROWS: list[str] = []          # lines for the "without legalize" section
NOISE: dict[str, float] = {}        # arch -> noise_cosine of its float model
_T0: list[float] = []



# ---------------------------------------------------------------------------------- the table


def _toolchain() -> str:
    from edgeforge.api import toolchain_versions

    return ", ".join(f"{k} {v}" for k, v in toolchain_versions().items() if v)


def noise_cosine(root: Path, arch: str, rel: float = NOISE_REL) -> float:
    """Mean cosine between the float model's logits on the evaluation crops with and without
    Gaussian noise of ``rel`` x the input's standard deviation: how strongly the test model
    itself amplifies a perturbation of about INT8 rounding size (Paddle dygraph, CPU)."""
    import numpy as np
    import paddle
    from paddle.vision import models

    layer = getattr(models, arch)(pretrained=False)
    layer.set_state_dict(paddle.load(str(root / "weights.pdparams")))
    layer.eval()
    with np.load(root / "data" / "eval.npz") as z:
        x = z["x"]
    noisy = (x + np.random.default_rng(0).normal(0.0, rel * float(x.std()), x.shape)).astype("float32")

    def logits(a):
        with paddle.no_grad():
            out = layer(paddle.to_tensor(a))
        out = out[0] if isinstance(out, (list, tuple)) else out
        return out.numpy().astype("float64").reshape(len(a), -1)

    a, b = logits(x), logits(noisy)
    return float(np.mean((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def render_table(results: dict[tuple[str, str], Cell], wall_s: float | None) -> str:
    notes: list[str] = []           # identical notes share a number

    def mark(cell: Cell | None) -> str:
        if cell is None:
            return "— (not run)"
        text = ("✓ " if cell.ok and not cell.limit else "✗ ") + cell.figure
        if cell.note:
            if cell.note not in notes:
                notes.append(cell.note)
            text += f" [{notes.index(cell.note) + 1}]"
        return text

    head = ("| architecture | " + " | ".join(h for h, _ in COLUMNS.values())
            + f" | float model under {NOISE_REL:.0%} input noise |")
    lines = [head, "|" + " --- |" * (len(COLUMNS) + 2)]
    for arch in ARCHS:
        noise = NOISE.get(arch)
        lines.append(f"| {arch} | " + " | ".join(mark(results.get((arch, c))) for c in COLUMNS)
                     + f" | {'cos %.4f' % noise if noise is not None else '—'} |")
    totals = []
    for c in COLUMNS:
        ok = sum(1 for a in ARCHS if (r := results.get((a, c))) is not None and r.ok and not r.limit)
        totals.append(f"**{ok}/{len(ARCHS)}**")
    lines.append("| **passed** | " + " | ".join(totals) + " | |")
    n_limit = sum(1 for r in results.values() if r.limit)
    n_miss = sum(1 for r in results.values() if r.expected_miss)
    n_fail = sum(1 for r in results.values() if not r.ok and not r.limit and not r.expected_miss)

    from benchmarks.common import BN_CALIBRATION_CROPS, BN_CALIBRATION_SEED

    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    wall = f"{wall_s / 60:.1f} min" if wall_s is not None else "? (partial run)"
    out = [
        "# Conformance: `paddle.vision.models` x edgeforge build columns",
        "",
        "Generated by the zoo suite (`make test-zoo`, i.e. `pytest -m zoo`; code in `tests/zoo/`).",
        "Do not edit by hand: a complete run of the suite rewrites this file.",
        "",
        f"Last run: {when}, {platform.machine()}, {os.cpu_count()} cores, suite wall time {wall}.",
        f"Toolchain: {_toolchain()}.",
        "",
        *lines,
        "",
        f"Float columns: relative max-abs error against Paddle Inference (criterion ≤ {FLOAT_REL_TOL:g}). "
        f"INT8 columns: cosine against Paddle Inference float (criterion ≥ {MIN_COSINE}); \"sim.\" = "
        "Paddle Inference on the fake-quant program (no ARM runtime here). Lite arm fp32: the `.nb` size. "
        f"Cells failing on an upstream limitation (edgeforge failing cleanly): {n_limit}. "
        f"INT8 misses of the random-weight test models (xfail): {n_miss}. Other failures: {n_fail}.",
        "",
    ]
    if notes:
        out += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
        out += [""]
    out += [
        "## What a cell means",
        "",
        "Every cell is one `edgeforge.api.build` of the architecture's project; the five columns of an",
        "architecture share one build cache (export and legalize run once). A cell passes when the",
        "artifact converts and, wherever the host can run it, its output matches Paddle Inference on",
        f"the float program: float within a relative max-abs error of {FLOAT_REL_TOL:g} (max |artifact −",
        f"Paddle| / max |Paddle|), INT8 with a cosine ≥ {MIN_COSINE} (mean per-sample cosine of the",
        "logits, as `verify` computes it). Models with several outputs (googlenet: 3) are checked on",
        "every output; `verify` itself judges output 0 only. INT8 builds use the targets' defaults",
        "(KL calibration, per-channel weights) with `--no-fallback`: plain INT8, no layer in float.",
        "",
        "| column | build | what is checked |",
        "| --- | --- | --- |",
        "| Lite arm fp32 | `--target rpi4 --precision fp32` | converts (`paddle_lite_opt "
        "--valid_targets=arm`); no ARM runtime on the host, so verify says `device-only`. The `.nb` "
        "is non-empty, its size and sha256 are the manifest's, and it is at least as large as the "
        "float weights. |",
        "| Lite arm int8 | `--target rpi4 --no-fallback` | converts, `device-only`, the `.nb` is under "
        "half the float `.nb`. Host-side numbers: Paddle Inference runs the fake-quant INT8 program "
        "that was converted (the `legalize.int8` output, which must hold quantize ops) against the "
        "float reference (simulated INT8, not the ARM kernels). |",
        "| Lite x86 fp32 | `--target linux-x86 --backend lite --precision fp32` | verify runs the `.nb` "
        "in the Paddle Lite x86 runtime on the host. |",
        "| ONNX fp32 | `--target linux-x86 --precision fp32` | verify runs onnxruntime. |",
        "| ONNX int8 | `--target linux-x86 --no-fallback` | onnxruntime QDQ model, under half the "
        "float size; verify runs onnxruntime. |",
        "",
        "## Weights and data",
        "",
        "No pretrained weights can be downloaded here, so every model has random weights, from",
        "`benchmarks.common.vision_project(..., init=\"calibrated\")`: He-normal conv and linear",
        "weights (fan-in counted per group), zero biases, and BatchNorm running statistics set to the",
        f"batch statistics of {BN_CALIBRATION_CROPS} real-image crops (seed {BN_CALIBRATION_SEED}). With the "
        "architectures' own init several",
        "nets give outputs that carry no signal: mobilenet_v1's logits are about 4e-16, mobilenet_v2/v3",
        "and the shufflenets 1e-4 to 1e-7 (Paddle's Conv2D init counts all input channels in the fan-in",
        "of a depthwise conv, and BatchNorm with default statistics does not rescale the vanishing",
        "activations), and alexnet's logits are nearly its biases (their spread over the batch is 2%",
        "of their size). With the calibrated init every architecture's logits are O(1) and move with",
        "the input (spread over the batch 20–130% of the mean magnitude).",
        "",
        f"Data: {CALIBRATION_CROPS} calibration crops (one batch) and {EVALUATION_CROPS} evaluation crops of",
        "sklearn's two sample photos (`benchmarks.common.sample_crops`, seeds 1 and 2), ImageNet-",
        "normalised, 224x224 (299x299 for inception_v3).",
        "",
        "## INT8 on random weights",
        "",
        "The INT8 cells that miss 0.99 are the deep BatchNorm networks, and they miss in both columns,",
        "with two independent quantizers (Paddle's PTQ for Lite, onnxruntime's QDQ quantizer for",
        "ONNX). The cause is the test model, not the toolchain: a random network whose BatchNorm",
        "layers normalise every activation is chaotic, and amplifies any small perturbation on its",
        "way to the logits. The last column measures that on the float model alone, with no",
        f"quantization anywhere: Gaussian noise of {NOISE_REL:.0%} of the input's standard deviation",
        "(about the size of INT8 rounding) moves the logits of the same networks to a cosine of",
        "0.966–0.993, while the networks that pass stay above 0.999. Float rounding is amplified",
        "the same way: the float columns' relative errors",
        "are 3e-7 to 3e-5 here, against 1e-7 to 3e-6 with the architectures' own init. A trained",
        "classifier is not chaotic like this, so these figures say nothing about the INT8 accuracy",
        "of a trained model; they do show that each INT8 path converts, runs and stays close.",
        "",
        "Checked once (2026-12-01), not re-run by the suite: more calibration data does not help",
        "(resnet50, Paddle PTQ: KL 0.980 with 16 crops, 0.982 with 64; hist 0.985 and 0.985); the",
        "calibration algorithm moves the figure a little (mobilenet_v2, Paddle PTQ: KL 0.932,",
        "abs_max 0.967, avg 0.968, hist 0.968, mse 0.969). With the architectures' own init,",
        "whose logits vanish or barely depend on the input (cosine ≥ 0.9999 under the same 1% noise",
        "for the eight nets checked),",
        "33 of 34 INT8 cells read ≥ 0.99 (shufflenet_v2_swish ONNX int8: 0.987): that figure is",
        "inflated, not better.",
        "",
        "One miss is not the model's: vgg16's float model is stable, its ONNX int8 passes, and its",
        "Lite arm int8 misses (0.987) only with Paddle PTQ's KL thresholds, the rpi4 target's default",
        "algorithm. Paddle's own KL search (edgeforge's fast one bypassed) gives the same figure;",
        "hist, avg and abs_max calibration give 0.9986–0.9988. Paddle's PTQ also quantizes",
        "activations to symmetric int8 (7 bits for the non-negative output of a ReLU) where",
        "onnxruntime uses asymmetric uint8: a likely reason why the Lite arm figures are mostly",
        "below the ONNX ones.",
        "",
        "The suite keeps the 0.99 criterion. The misses are listed with a regression floor",
        "(`INT8_MISSES` in tests/zoo/test_conformance.py): the test xfails while the cosine stays at or",
        "above the floor, fails below it, and fails when the cell starts to pass (then the entry goes).",
        "",
    ]
    if EXTRA_ROWS:
        out += [
            "## Without legalize: upstream failures edgeforge reports cleanly",
            "",
            "No cell above fails on an upstream limitation (`KNOWN_LIMITS` in",
            "tests/zoo/test_conformance.py is empty): legalize removes every one the raw exports hit.",
            "Without it (`edgeforge build --no-legalize`), Paddle Lite 2.13rc0's `paddle_lite_opt`",
            "kills its process on these raw Paddle 3.3 exports (docs/legalize-findings.md). The suite",
            "checks that edgeforge survives: `PassError` from `api.build`, and from the CLI exit code 3",
            "with one `error:` line.",
            "",
            "| architecture | build | edgeforge's error line |",
            "| --- | --- | --- |",
            *EXTRA_ROWS,
            "",
        ]
    return "\n".join(out)
