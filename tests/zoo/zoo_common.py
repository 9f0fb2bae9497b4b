"""Shared by the zoo suite's conftest and tests: the architectures, the columns, the cell
records and the table (docs/conformance.md)."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
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
# the suite's own small models (tests/zoo/custom_models.py, custom_projects.py): attention,
# gates, upsampling, two inputs, two outputs
CUSTOM_MODELS = ["vit_tiny", "se_cnn", "unet_seg", "two_input", "two_output",
                 # issue 25: recurrent nets (PIR for ONNX, legacy for Lite), exported inference models
                 "crnn", "gru_cls", "digits_legacy", "digits_pir",
                 # a text model on int64 token ids (embedding + 2 encoder blocks)
                 "text_cls",
                 # detectors: multiclass_nms3 in the graph, and raw outputs (tests/zoo/detector_cells.py)
                 "det_nms", "det_matrix", "det_raw"]
MODELS = ARCHS + CUSTOM_MODELS
# key -> (table heading, api.build arguments)
COLUMNS = {
    # backend="lite": rpi4 builds a PIR program through its ONNX backend unless Lite is asked for
    "lite-arm-fp32": ("Lite arm fp32", dict(target="rpi4", backend="lite", precision="fp32")),
    "lite-arm-int8": ("Lite arm int8", dict(target="rpi4", backend="lite")),
    "lite-x86-fp32": ("Lite x86 fp32", dict(target="linux-x86", backend="lite", precision="fp32")),
    "onnx-fp32": ("ONNX fp32", dict(target="linux-x86", precision="fp32")),
    "onnx-int8": ("ONNX int8", dict(target="linux-x86")),
}
CALIBRATION_IMAGES = 32    # one batch (the targets' batch_size is 32)
EVALUATION_IMAGES = 64
FLOAT_REL_TOL = 1e-4
MIN_COSINE = 0.99
NOISE_REL = 0.01           # the float model's own sensitivity: input noise, relative to its std
INT8_MISS_NOTE = ("INT8 (with the accuracy budget's calibration and float-layer fallback) stays below "
                  "cosine 0.99 without keeping more than half the model in float: the test model itself is "
                  "this sensitive (last column); see \"INT8 misses\".")


@dataclass
class Cell:
    ok: bool
    figure: str                      # what the table shows after the mark
    note: str | None = None          # a footnote (upstream limitation, failure reason)
    limit: bool = False              # an upstream limitation, and edgeforge failed cleanly
    seconds: float | None = None
    cosine: float | None = None      # INT8 cells: the figure the criterion is applied to
    expected_miss: bool = False      # a listed INT8 cosine miss of a sensitive test model (xfail)
    route: str | None = None         # the program route the build took (manifest export.route)


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
FACTS: dict[str, dict] = {}         # arch -> digits_project facts (resolution, training, accuracy)
_T0: list[float] = []



# ---------------------------------------------------------------------------------- the table


def _toolchain() -> str:
    from edgeforge.api import toolchain_versions

    return ", ".join(f"{k} {v}" for k, v in toolchain_versions().items() if v)


def noise_cosine(root: Path, arch: str, rel: float = NOISE_REL) -> float:
    """Mean cosine between the float model's outputs on the evaluation inputs with and without
    Gaussian noise of ``rel`` x each input's standard deviation (the worst output of a
    multi-output model): how strongly the test model itself amplifies a perturbation of about
    INT8 rounding size (Paddle dygraph, CPU)."""
    import numpy as np
    import paddle

    from edgeforge.passes.export import import_factory
    from edgeforge.project import load_project

    project = load_project(root)
    rng = np.random.default_rng(0)
    with np.load(root / "data" / "eval.npz") as z:
        clean = [z[s.name] for s in project.inputs]
    noisy = [(x + rng.normal(0.0, rel * float(x.std()), x.shape)).astype("float32") for x in clean]
    if project.inference is not None:          # an exported program: Paddle Inference on it
        from edgeforge.paddle_env import paddle_inference

        names = [s.name for s in project.inputs]

        def outputs(arrays):
            outs = paddle_inference(project.inference.parent, dict(zip(names, arrays)))
            return [o.astype("float64").reshape(len(arrays[0]), -1) for o in outs]
    else:
        layer = import_factory(root, project.spec.model.factory)()
        layer.set_state_dict(paddle.load(str(root / "weights.pdparams")))
        layer.eval()

        def outputs(arrays):
            with paddle.no_grad():
                out = layer(*[paddle.to_tensor(a) for a in arrays])
            outs = out if isinstance(out, (list, tuple)) else [out]
            return [o.numpy().astype("float64").reshape(len(arrays[0]), -1) for o in outs]

    cosines = [float(np.mean((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))
               for a, b in zip(outputs(clean), outputs(noisy))]
    return min(cosines)


def save_results(path: Path, results: dict[tuple[str, str], Cell], wall_s: float | None) -> None:
    """The raw cells, for re-rendering the table without re-running the suite."""
    import dataclasses
    import json

    data = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"), "machine": platform.machine(),
            "cores": os.cpu_count(), "toolchain": _toolchain(), "wall_s": wall_s,
            "cells": [{"arch": a, "column": c, **dataclasses.asdict(cell)} for (a, c), cell in results.items()],
            "noise": NOISE, "facts": FACTS, "extra_rows": EXTRA_ROWS}
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def load_results(path: Path) -> dict:
    import json

    data = json.loads(path.read_text())
    data["results"] = {(c.pop("arch"), c.pop("column")): Cell(**c) for c in data.pop("cells")}
    return data


def render_table(results: dict[tuple[str, str], Cell], wall_s: float | None, *, noise: dict | None = None,
                 facts: dict | None = None, extra_rows: list[str] | None = None, date: str | None = None,
                 machine: str | None = None, cores: int | None = None, toolchain: str | None = None) -> str:
    noise = NOISE if noise is None else noise
    facts = FACTS if facts is None else facts
    extra_rows = EXTRA_ROWS if extra_rows is None else extra_rows
    notes: list[str] = []           # identical notes share a number

    def mark(cell: Cell | None) -> str:
        if cell is None:
            return "— (not run)"
        text = ("✓ " if cell.ok and not cell.limit else "✗ ") + cell.figure
        if cell.route:
            text += f" · {cell.route}"
        if cell.note:
            if cell.note not in notes:
                notes.append(cell.note)
            text += f" [{notes.index(cell.note) + 1}]"
        return text

    head = ("| architecture | input, digits accuracy (float) | " + " | ".join(h for h, _ in COLUMNS.values())
            + f" | float model under {NOISE_REL:.0%} input noise |")
    lines = [head, "|" + " --- |" * (len(COLUMNS) + 3)]
    for arch in MODELS:
        n = noise.get(arch)
        f = facts.get(arch) or {}
        kind = " pixel acc." if f.get("accuracy_kind") == "pixel" else ""
        kind = " line acc." if f.get("accuracy_kind") == "line" else kind
        kind = " mAP@0.5" if f.get("accuracy_kind") == "map50" else kind
        shape = f.get("input") or f"{f.get('size')}x{f.get('size')}"
        model = (f"{shape}, {f['float_accuracy']:.0%}{kind} ({f['steps']} steps)" if f else "—")
        lines.append(f"| {arch} | {model} | " + " | ".join(mark(results.get((arch, c))) for c in COLUMNS)
                     + f" | {'cos %.4f' % n if n is not None else '—'} |")
    totals = []
    for c in COLUMNS:
        ok = sum(1 for a in MODELS if (r := results.get((a, c))) is not None and r.ok and not r.limit)
        totals.append(f"**{ok}/{len(MODELS)}**")
    lines.append("| **passed** | | " + " | ".join(totals) + " | |")
    n_limit = sum(1 for r in results.values() if r.limit)
    n_miss = sum(1 for r in results.values() if r.expected_miss)
    n_fail = sum(1 for r in results.values() if not r.ok and not r.limit and not r.expected_miss)

    from benchmarks.common import TRAIN_RECIPE

    when = date or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    wall = f"{wall_s / 60:.1f} min" if wall_s is not None else "? (partial run)"
    train_s = sum((f or {}).get("seconds", 0.0) for f in facts.values())
    out = [
        "# Conformance: `paddle.vision.models` and the suite's own models x edgeforge build columns",
        "",
        "Generated by the zoo suite (`make test-zoo`, i.e. `pytest -m zoo`; code in `tests/zoo/`).",
        "Do not edit by hand: a complete run of the suite rewrites this file (and conformance.json,",
        "its raw cells; `python tests/zoo/zoo_common.py docs/conformance.json` re-renders it).",
        "",
        f"Last run: {when}, {machine or platform.machine()}, {cores or os.cpu_count()} cores, suite wall time "
        f"{wall} (of which training the {len(MODELS)} test models: {train_s / 60:.1f} min).",
        f"Toolchain: {toolchain or _toolchain()}.",
        "",
        *lines,
        "",
        "After each figure, the program route the build took (docs/export.md): `pir` (Paddle 3's PIR "
        "program through paddle2onnx 2.1, the ONNX columns' first choice) or `legacy` (the ProgramDesc: "
        "Paddle Lite's only input, and the ONNX fallback). Recurrent models' INT8 cells keep the RNN in "
        "float; their size criterion is half the rest plus the recurrent weights. Detectors (det_nms: "
        "PaddleDetection's multiclass_nms3 in the graph; det_matrix: matrix_nms in the graph, which ONNX "
        "has not: there the graph ends at boxes and scores and the runner's matrix_nms follows; det_raw: "
        "raw boxes and scores, NMS on the host) are "
        "judged on detections: mAP@0.5 against the labelled boxes, the artifact's within 10 points of the "
        "float model's (fp32: 0.5), and on ONNX the same detections at batch 1 and 4 (verify.batches); "
        "no size criterion (a 40 KB model is mostly the quantization scales).",
        "",
        f"Float columns: relative max-abs error against Paddle Inference (criterion ≤ {FLOAT_REL_TOL:g}). "
        f"INT8 columns: cosine against Paddle Inference float, worst output (criterion ≥ {MIN_COSINE}); "
        "\"sim.\" = Paddle Inference on the fake-quant program (no ARM runtime here); then the artifact size "
        "and what the accuracy budget did (\"plain KL\": plain INT8 held; else the plain-INT8 cosine it "
        "started from, the calibration it moved to and the layers it kept in float). Lite arm fp32: the "
        f"`.nb` size. Cells failing on an upstream limitation (edgeforge failing cleanly): {n_limit}. "
        f"INT8 misses of sensitive test models (xfail): {n_miss}. Other failures: {n_fail}.",
        "",
    ]
    if notes:
        out += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
        out += [""]
    out += [
        "## What a cell means",
        "",
        "Every cell is one `edgeforge.api.build` of the architecture's project with the target's",
        "defaults; the five columns of an architecture share one build cache (export and legalize run",
        "once). A cell passes when the artifact converts and, wherever the host can run it, its output",
        "matches Paddle Inference on the float program: float within a relative max-abs error of",
        f"{FLOAT_REL_TOL:g} (max |artifact − Paddle| / max |Paddle|), INT8 with a cosine ≥ {MIN_COSINE} (mean",
        "per-sample cosine of the logits; every output of a multi-output model, googlenet's 3, and the",
        "worst counts, as in `verify`) while the artifact stays under half the float size (an INT8",
        "model in substance).",
        "",
        "INT8 builds run the accuracy budget as any build does. The evaluation set has no labels, so",
        f"the budget is the cosine `verify` checks (target `min_cosine`, {MIN_COSINE}). When plain INT8",
        "(KL calibration, per-channel weights) misses it, the quantize pass first tries the other",
        "calibrations (hist, mse, avg), keeps the best, and then keeps the layers that lose the most",
        "fidelity (per-layer SQNR, ranked again on each round's model) in float, 1, 2, 4, ... more per",
        "round, until the budget holds, and bisects back to the fewest that still hold. A layer kept in",
        "float has float weights and a float input (on the ONNX path edgeforge reads it past its",
        "QuantizeLinear/DequantizeLinear pair; onnxruntime's `nodes_to_exclude` alone leaves the input",
        "quantized), as in Paddle's PTQ. On the ONNX path, when that kept layers in float, the fit",
        "runs again with only Conv, ConvTranspose, MatMul and Gemm quantized (Adds, Concats and pools",
        "in float) and the fit with the fewest float weight bytes ships (docs/int8.md).",
        "",
        "| column | build | what is checked |",
        "| --- | --- | --- |",
        "| Lite arm fp32 | `--target rpi4 --precision fp32` | converts (`paddle_lite_opt "
        "--valid_targets=arm`); no ARM runtime on the host, so verify says `device-only`. The `.nb` "
        "is non-empty, its size and sha256 are the manifest's, and it is at least as large as the "
        "float weights. |",
        "| Lite arm int8 | `--target rpi4` | converts, `device-only`, the `.nb` is under half the float "
        "`.nb`. Host-side numbers: Paddle Inference runs the fake-quant INT8 program that was converted "
        "(the `legalize.int8` output, which must hold quantize ops) against the float reference "
        "(simulated INT8, not the ARM kernels); it must agree with the budget's own figure. |",
        "| Lite x86 fp32 | `--target linux-x86 --backend lite --precision fp32` | verify runs the `.nb` "
        "in the Paddle Lite x86 runtime on the host. |",
        "| ONNX fp32 | `--target linux-x86 --precision fp32` | verify runs onnxruntime. |",
        "| ONNX int8 | `--target linux-x86` | onnxruntime QDQ model, under half the float size; verify "
        "runs onnxruntime and its status must match the cell. |",
        "",
        "## Test models and data",
        "",
        "No pretrained weights can be downloaded here. Each architecture (`paddle.vision.models`, its",
        "own random init, `num_classes=10`) is trained briefly on sklearn's handwritten digits (real",
        "8x8 scans, bilinear-upsampled, grey replicated to 3 channels) by",
        "`benchmarks.common.digits_project`: Adam on cross-entropy (every head of googlenet), recipe",
        f"`TRAIN_RECIPE` (default {TRAIN_RECIPE['*'][0]} steps of {TRAIN_RECIPE['*'][1]} images), then the",
        "BatchNorm statistics are re-measured on 128 training images. Inputs are 32x32, the smallest",
        "that most architectures take, except alexnet and googlenet (224x224: their classifiers are",
        "sized for it) and inception_v3 (75x75, its minimum). Of the 1797 digits, 64 held-out images",
        f"are the evaluation set and 32 others the calibration set ({CALIBRATION_IMAGES}/{EVALUATION_IMAGES}); the rest train.",
        "",
        "The last five rows are the suite's own models (`tests/zoo/custom_models.py`, trained by",
        "`custom_projects.py` on the same digits at 32x32, one channel, same split): `vit_tiny` (8x8",
        "patch conv, position embedding, two pre-norm blocks of LayerNorm, `nn.MultiHeadAttention`",
        "and a GELU MLP), `se_cnn` (tanh stem, sigmoid-gated squeeze-excitation), `unet_seg` (max-pool",
        "encoder, Conv2DTranspose and bilinear `F.interpolate` up, skip concats; per-pixel stroke",
        "mask, intensity > 0.5, accuracy per pixel), `two_input` (the image and its 16 row/column",
        "mean intensities) and `two_output` (class logits and a sigmoid stroke map). They need",
        "edgeforge's legacy-export patch for Paddle 3.3 (docs/export.md) and, `unet_seg`, the",
        "ONNX pre-processing fallback for incomplete symbolic shapes.",
        "",
        "Why trained: an earlier version of this suite used random weights (He-normal, BatchNorm",
        "statistics measured on photo crops). Random deep BatchNorm networks are chaotic: Gaussian noise",
        "of 1% of the input's spread moved the float logits of resnet50, the mobilenets, the",
        "shufflenets and inception_v3 to a cosine of 0.966–0.993, so INT8 (about that much noise per",
        "layer) missed 0.99 on 10–11 of 17 models in both INT8 columns, with two independent",
        "quantizers, and no calibration or float fallback could fix it (mobilenet_v2 still read 0.989",
        "with 52 of its 53 layers in float). Their logits were also dominated by an input-independent",
        "component (mean cosine between different inputs' logits about 0.9), which inflates every",
        "cosine. Trained 10-class heads have no such component (about 0.05 here), so the INT8 cosine",
        "measures what it should.",
        "",
        "## INT8 misses",
        "",
        "The last column is the float model's own sensitivity: the mean cosine between its logits with",
        f"and without Gaussian input noise of {NOISE_REL:.0%} of the input's standard deviation. A briefly trained",
        "model can be far more sensitive than a fully trained one (digits are smooth upsampled scans:",
        "nothing in training constrains the response to pixel noise). Where that figure is low, INT8",
        "misses too, and the budget may have to keep most of the model in float to reach 0.99; the",
        "cell then fails the size criterion or the cosine. Such a miss can be listed with a regression",
        "floor (`INT8_MISSES` in tests/zoo/test_conformance.py): the test xfails while the cosine",
        "stays at or above the floor, fails below it, and fails when the cell starts to pass.",
        f"This run: {n_miss} listed miss{'es' if n_miss != 1 else ''}.",
        "",
    ]
    if extra_rows:
        out += [
            "## Without legalize: upstream failures edgeforge reports cleanly",
            "",
            "Legalize removes every converter failure the raw exports hit (cells that fail on an",
            f"upstream limitation legalize cannot remove are listed in `KNOWN_LIMITS`, tests/zoo/test_conformance.py: {n_limit} this run).",
            "Without it (`edgeforge build --no-legalize`), Paddle Lite 2.13rc0's `paddle_lite_opt`",
            "kills its process on these raw Paddle 3.3 exports (docs/legalize-findings.md). The suite",
            "checks that edgeforge survives: `PassError` from `api.build`, and from the CLI exit code 3",
            "with one `error:` line.",
            "",
            "| architecture | build | edgeforge's error line |",
            "| --- | --- | --- |",
            *extra_rows,
            "",
        ]
    from suite_cells import section      # Paddle's suite models (test_suite_models.py), kept

    return "\n".join(out) + ("\n" + section() if section() else "")


if __name__ == "__main__":       # re-render the table from a run's raw cells
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else TABLE.with_suffix(".json")
    d = load_results(src)
    TABLE.write_text(render_table(d["results"], d["wall_s"], noise=d["noise"], facts=d["facts"],
                                  extra_rows=d["extra_rows"], date=d["date"], machine=d["machine"],
                                  cores=d["cores"], toolchain=d["toolchain"]))
    print(f"wrote {TABLE}")
