"""The zoo conformance suite's fixtures and its table.

Every test in tests/zoo is one cell: an architecture of ``paddle.vision.models`` (the 17 that
build without downloading) x one build column. A session fixture per architecture writes its
model project once; the columns of that architecture share one build cache (export and
legalize run once), which is deleted with the builds when pytest moves to the next
architecture. Each cell records its figure; at the end of the session the table goes to
docs/conformance.md when all cells ran (a partial run writes it under the pytest basetemp).
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

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


def input_size(arch: str) -> int:
    return 299 if arch == "inception_v3" else 224


@dataclass
class Cell:
    ok: bool
    figure: str                      # what the table shows after the mark
    note: str | None = None          # a footnote (upstream limitation, failure reason)
    limit: bool = False              # an upstream limitation, and edgeforge failed cleanly
    seconds: float | None = None


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
_T0: list[float] = []


def pytest_sessionstart(session):
    _T0.append(time.time())


@pytest.fixture(scope="session")
def zoo_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("zoo")


@pytest.fixture(scope="session", params=ARCHS)
def zoo_project(request, zoo_root) -> ZooProject:
    """The architecture's project (calibrated random weights, real-image crops) and an empty
    build cache shared by its columns. Removed once pytest is done with the architecture."""
    from benchmarks.common import vision_project

    arch = request.param
    base = zoo_root / arch
    size = input_size(arch)
    root = vision_project(base / "project", arch, calib=CALIBRATION_CROPS, evaluation=EVALUATION_CROPS,
                          size=size, seed=0, init="calibrated")
    proj = ZooProject(arch, root, base / "cache", base / "builds", size)
    yield proj
    # vgg16's cache alone is several GB; keep only the project (for a rerun by hand)
    shutil.rmtree(proj.cache, ignore_errors=True)
    shutil.rmtree(proj.builds, ignore_errors=True)
    (root / "weights.pdparams").unlink(missing_ok=True)


@pytest.fixture
def record_cell():
    def record(arch: str, column: str, cell: Cell) -> Cell:
        RESULTS[(arch, column)] = cell
        return cell
    return record


# ---------------------------------------------------------------------------------- the table


def _toolchain() -> str:
    from edgeforge.api import toolchain_versions

    return ", ".join(f"{k} {v}" for k, v in toolchain_versions().items() if v)


def render_table(results: dict[tuple[str, str], Cell], wall_s: float | None) -> str:
    notes: list[str] = []

    def mark(cell: Cell | None) -> str:
        if cell is None:
            return "— (not run)"
        text = ("✓ " if cell.ok and not cell.limit else "✗ ") + cell.figure
        if cell.note:
            notes.append(cell.note)
            text += f" [{len(notes)}]"
        return text

    head = "| architecture | " + " | ".join(h for h, _ in COLUMNS.values()) + " |"
    lines = [head, "|" + " --- |" * (len(COLUMNS) + 1)]
    for arch in ARCHS:
        lines.append(f"| {arch} | " + " | ".join(mark(results.get((arch, c))) for c in COLUMNS) + " |")
    totals = []
    for c in COLUMNS:
        ok = sum(1 for a in ARCHS if (r := results.get((a, c))) is not None and r.ok and not r.limit)
        totals.append(f"**{ok}/{len(ARCHS)}**")
    lines.append("| **passed** | " + " | ".join(totals) + " |")

    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    wall = f"{wall_s / 60:.1f} min" if wall_s is not None else "?"
    out = [
        "# Conformance: `paddle.vision.models` x edgeforge build columns",
        "",
        "Generated by the zoo suite (`make test-zoo`, i.e. `pytest -m zoo`; code in `tests/zoo/`).",
        "Do not edit by hand: a complete run of the suite rewrites this file.",
        "",
        f"Last run: {when}, {platform.machine()}, {os.cpu_count()} cores, suite wall time {wall}. "
        f"Toolchain: {_toolchain()}.",
        "",
        *lines,
        "",
    ]
    if notes:
        out += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
        out += [""]
    out += [
        "## What a cell means",
        "",
        "Every cell is `edgeforge.api.build` of the architecture's project for one column, with a",
        "build cache shared by the five columns of an architecture. A cell passes when the artifact",
        "converts and, wherever the host can run it, its output matches Paddle Inference on the float",
        f"program: float within a relative max-abs error of {FLOAT_REL_TOL:g}",
        f"(max |artifact − Paddle| / max |Paddle|), INT8 with a cosine ≥ {MIN_COSINE} (mean per-sample",
        "cosine of the logits, what `verify` reports). Models with several outputs (googlenet: 3) are",
        "checked on every output.",
        "",
        "| column | build | what is checked |",
        "| --- | --- | --- |",
        "| Lite arm fp32 | `--target rpi4 --precision fp32` | converts (`paddle_lite_opt --valid_targets=arm`); "
        "no ARM runtime on the host, so verify says `device-only`: the `.nb` exists, is non-empty, its "
        "size and sha256 are those in the manifest. The figure is the `.nb` size. |",
        "| Lite arm int8 | `--target rpi4` (KL PTQ, `--no-fallback`) | converts, `device-only` as above, "
        "and the `.nb` is under half the float `.nb`. Host-side numeric check: Paddle Inference runs "
        "the fake-quant INT8 program that was converted (the `legalize.int8` output) against the "
        "float reference; the figure is that cosine (simulated INT8, not the ARM kernels). |",
        "| Lite x86 fp32 | `--target linux-x86 --backend lite --precision fp32` | verify runs the `.nb` "
        "with the Paddle Lite x86 runtime on the host; the figure is the relative max-abs error. |",
        "| ONNX fp32 | `--target linux-x86 --precision fp32` | verify runs onnxruntime; relative "
        "max-abs error. |",
        "| ONNX int8 | `--target linux-x86` (KL → onnxruntime QDQ, `--no-fallback`) | verify runs "
        "onnxruntime; cosine. |",
        "",
        "## Weights and data",
        "",
        "No pretrained weights can be downloaded here, so every model has random weights, drawn by",
        "`benchmarks.common.vision_project(..., init=\"calibrated\")`: He-normal conv and linear",
        "weights, zero biases, and BatchNorm running statistics measured on 16 real-image crops",
        "(seed 3). With the architectures' own init the outputs of several nets carry no signal:",
        "mobilenet_v1's logits are about 4e-16, mobilenet_v2/v3 and the shufflenets give 1e-4 to",
        "1e-7 (BatchNorm with default statistics does not rescale the vanishing activations), and",
        "alexnet's logits are almost its biases (their spread over the batch is 2 % of their size).",
        "A relative error or a cosine on such outputs says little; with the calibrated init every",
        "architecture's logits are O(1) and move with the input (batch spread 20–130 % of the mean",
        "magnitude).",
        "",
        f"Data: {CALIBRATION_CROPS} calibration crops and {EVALUATION_CROPS} evaluation crops of "
        "sklearn's two sample photos (`sample_crops`, seeds 1 and 2), ImageNet-normalised, "
        "224x224 (299x299 for inception_v3). INT8 figures on random weights are a check of the",
        "conversion path, not a statement about accuracy on a trained model.",
        "",
    ]
    if EXTRA_ROWS:
        out += [
            "## Without legalize: upstream failures edgeforge reports cleanly",
            "",
            "The raw Paddle 3.3 export (`edgeforge build --no-legalize`) of these architectures "
            "crashes Paddle Lite 2.13rc0's `paddle_lite_opt` (docs/legalize-findings.md). The "
            "suite checks that edgeforge survives it: exit code 3 and one `error:` line.",
            "",
            "| architecture | build | edgeforge's error line |",
            "| --- | --- | --- |",
            *EXTRA_ROWS,
            "",
        ]
    return "\n".join(out)


def pytest_sessionfinish(session, exitstatus):
    if not RESULTS:
        return
    complete = all((a, c) in RESULTS for a in ARCHS for c in COLUMNS)
    wall = time.time() - _T0[0] if _T0 and complete else None
    text = render_table(RESULTS, wall)
    path = Path(os.environ.get("EDGEFORGE_ZOO_TABLE", TABLE if complete else
                               Path(str(session.config._tmp_path_factory.getbasetemp())) / "conformance.md"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"zoo: conformance table written to {path}"
                            + ("" if complete else " (partial run; docs/conformance.md untouched)"))
