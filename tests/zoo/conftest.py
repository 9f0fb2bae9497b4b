"""The zoo conformance suite's fixtures, and the hook that writes its table.

Every test in tests/zoo is one cell: an architecture of ``paddle.vision.models`` (the 17 that
build without downloading) x one build column. A session fixture per architecture trains and
writes its model project once; the columns of that architecture share one build cache (export and
legalize run once), which is deleted with the builds when pytest moves to the next
architecture. Each cell records its figure; at the end of the session the table goes to
docs/conformance.md when all cells ran (a partial run writes it under the pytest basetemp).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from zoo_common import (_T0, CALIBRATION_IMAGES, COLUMNS, EVALUATION_IMAGES, FACTS, NOISE, RESULTS,
                        MODELS, TABLE, Cell, ZooProject, noise_cosine, render_table, save_results)

os.environ["FLAGS_enable_pir_api"] = "0"


_T0.append(time.time())     # collection start: `pytest -m zoo` from the root loads this late


def pytest_sessionstart(session):   # called when tests/zoo is on the command line
    _T0[:] = [time.time()]


@pytest.fixture(scope="session")
def zoo_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("zoo")


@pytest.fixture(scope="session", params=MODELS)
def zoo_project(request, zoo_root) -> ZooProject:
    """The architecture's project (trained briefly on sklearn's digits, real held-out digits
    for calibration and evaluation) and an empty build cache shared by its columns. Removed
    once pytest is done with the architecture."""
    from benchmarks.common import digits_project
    from custom_projects import CUSTOM, custom_project

    arch = request.param
    base = zoo_root / arch
    from detector_cells import DETECTORS, detector_project

    if arch in DETECTORS:     # detectors with and without NMS in the graph (detector_cells.py)
        root, facts = detector_project(base / "project", arch)
    elif arch in CUSTOM:      # the suite's own models (custom_models.py)
        root, facts = custom_project(base / "project", arch, calib=CALIBRATION_IMAGES, evaluation=EVALUATION_IMAGES)
    else:
        root, facts = digits_project(base / "project", arch, calib=CALIBRATION_IMAGES, evaluation=EVALUATION_IMAGES)
    proj = ZooProject(arch, root, base / "cache", base / "builds", facts["size"], extras=facts)
    # a cosine of NMS rows means nothing (the detectors' cells are mAP); noise on token ids neither
    if arch not in DETECTORS and arch != "text_cls":
        NOISE[arch] = noise_cosine(root, arch)
    FACTS[arch] = facts
    yield proj
    # vgg16's cache alone is several GB; keep only the project (for a rerun by hand)
    shutil.rmtree(proj.cache, ignore_errors=True)
    shutil.rmtree(proj.builds, ignore_errors=True)
    (root / "weights.pdparams").unlink(missing_ok=True)
    (root / "det.pdparams").unlink(missing_ok=True)


@pytest.fixture
def record_cell():
    def record(arch: str, column: str, cell: Cell) -> Cell:
        RESULTS[(arch, column)] = cell
        return cell
    return record


def pytest_sessionfinish(session, exitstatus):
    if not RESULTS:
        return
    complete = all((a, c) in RESULTS for a in MODELS for c in COLUMNS)
    wall = time.time() - _T0[0] if _T0 and complete else None
    text = render_table(RESULTS, wall)
    path = Path(os.environ.get("EDGEFORGE_ZOO_TABLE", TABLE if complete else
                               Path(str(session.config._tmp_path_factory.getbasetemp())) / "conformance.md"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    save_results(path.with_suffix(".json"), RESULTS, wall)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"zoo: conformance table written to {path}"
                            + ("" if complete else " (partial run; docs/conformance.md untouched)"))
