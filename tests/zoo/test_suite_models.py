"""Zoo cells of Paddle's own suite models (issue 45): PP-LCNet x0.5, PP-HGNetV2-B0, PP-LiteSeg
and PicoDet-S (tests/zoo/suite_models.py), each exported as a PIR ``.json`` and a legacy
``.pdmodel``, through the zoo's five build columns and jetson-orin INT8.

A cell passes (verify passed, or for Lite arm the ``.nb`` and the simulated INT8 metric within
the budget), or is an exit-2 refusal whose one line names a working command. A model whose
export itself fails in Paddle (PicoDet's PIR ``paddle.jit.save`` in ``multiclass_nms3``,
TOOLCHAIN item 28) shows that failure in its row. Needs ``make suite-models`` (the wheels);
``EDGEFORGE_SUITE_PROJECTS=DIR`` reuses projects written by ``suite_models.py MODEL FMT DIR/MODEL-FMT``.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from helpers import run_cli
from suite_cells import ROWS, SUITE_COLUMNS, host_cell, lite_arm_cell, render, save, write_section
from suite_models import SIZES, SUITE, require, suite_project, train
from zoo_common import TABLE, Cell, ZooProject

pytestmark = [pytest.mark.zoo, pytest.mark.timeout(3600)]

assert ROWS == [f"{m}-{f}" for m in SUITE for f in ("legacy", "pir")]
# rows whose export fails in Paddle itself: the substring of the recorded error
EXPORT_FAILS = {"picodet_s-pir": "multiclass_nms3"}
RESULTS: dict[tuple[str, str], Cell] = {}
PIR_REFUSALS: dict[str, Cell] = {}
FACTS: dict[str, dict] = {}
_TRAINED: dict = {}


@pytest.fixture(scope="session", params=ROWS)
def suite_row(request, tmp_path_factory) -> ZooProject:
    if require() is None:
        pytest.skip("the suite wheels are not installed: run `make suite-models`")
    row = request.param
    name, fmt = row.rsplit("-", 1)
    base = tmp_path_factory.mktemp(row)
    reuse = Path(os.environ.get("EDGEFORGE_SUITE_PROJECTS", "/nonexistent")) / row
    if (reuse / "facts.json").is_file():
        root, facts = reuse, json.loads((reuse / "facts.json").read_text())
    else:
        if name not in _TRAINED:
            _TRAINED.clear()            # one model's training in memory at a time
            _TRAINED[name] = train(name)
        root, facts = suite_project(base / "project", name, fmt, trained=_TRAINED[name])
    FACTS[row] = {k: v for k, v in facts.items() if k != "factory"}      # no scratch paths in the docs
    return ZooProject(row, root, base / "cache", base / "builds", SIZES[name], extras=facts)


def _refusal(proj: ZooProject, column: str, tmp_path) -> Cell:
    """The build refused before any pass: through the CLI, exit 2, one line, and the hint names
    a command (``edgeforge ...`` or the re-export)."""
    kw = dict(SUITE_COLUMNS[column][1])
    args = ["--target", kw.pop("target")] + [a for k, v in kw.items() for a in (f"--{k}", v)]
    res = run_cli("build", str(proj.root), *args, "--out", str(tmp_path / "out"),
                  env={"EDGEFORGE_CACHE": str(proj.cache)})
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and not (tmp_path / "out").exists()
    names_command = any(w in res.stderr for w in ("edgeforge ", "FLAGS_enable_pir_api=0"))
    assert names_command, f"the refusal names no command: {res.stderr[-1000:]}"
    hint = next((ln for ln in res.stderr.splitlines() if ln.startswith("hint:")), "")
    note = f"`{errors[0][:600]}`" + (f" `{hint[:300]}`" if hint else "")
    for where in {os.path.relpath(r) for r in (proj.root, proj.root.resolve())} | {str(proj.root.resolve())}:
        note = note.replace(f" {where} ", " PROJECT ")      # one note per kind of refusal
    return Cell(True, "refused (exit 2)", limit=True, note=note)


def _export_refusal(f: dict, tmp_path) -> Cell:
    """A model whose PIR ``paddle.jit.save`` fails in Paddle: ``edgeforge export --pir`` of its code
    refuses it (exit 2) in one line naming the ``--legacy`` export, and that command, run as
    printed, writes the legacy program (the ``-legacy`` row builds the same program)."""
    import shlex

    out = tmp_path / "exported"
    res = run_cli("export", f["dir"], "--factory", f["factory"], "--weights", f["weights"], "--input", f["input"],
                  "--pir", "--out", str(out))
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    command = errors[0].split("the legacy program exports: ", 1)[1].split("; then build from it", 1)[0]
    again = run_cli(*shlex.split(command)[1:])
    assert again.returncode == 0 and (out / "inference.pdmodel").is_file(), again.stderr[-2000:]
    line = errors[0].replace(str(out), "OUT").replace(f["dir"], "CODE")
    return Cell(True, "PIR export fails in Paddle; refused (exit 2)", limit=True, note=f"`edgeforge export --pir`: `{line[:700]}`")


@pytest.mark.parametrize("column", list(SUITE_COLUMNS))
def test_suite_cell(suite_row: ZooProject, column: str, tmp_path):
    from test_conformance import build_isolated, step_artifact

    row, facts = suite_row.arch, suite_row.extras
    t0 = time.perf_counter()
    if facts.get("export_error"):
        assert EXPORT_FAILS.get(row, "\0") in facts["export_error"], facts["export_error"]
        if row not in PIR_REFUSALS:
            PIR_REFUSALS[row] = _export_refusal(facts["factory"], tmp_path)
        RESULTS[(row, column)] = PIR_REFUSALS[row]
        return
    try:
        r = build_isolated(suite_row, column, kw=SUITE_COLUMNS[column][1])
    except AssertionError as exc:
        if "ConfigError" not in str(exc):
            RESULTS[(row, column)] = Cell(False, "error", note=f"{column}: {str(exc)[:300]}")
            raise
        cell = _refusal(suite_row, column, tmp_path)
    else:
        if column.startswith("lite-arm"):
            int8 = column == "lite-arm-int8"
            cell = lite_arm_cell(r, step_artifact(suite_row, r, "legalize.int8") if int8 else None)
        else:
            cell = host_cell(r, column)
        cell.route = (r.manifest.get("export") or {}).get("route")
    cell.seconds = time.perf_counter() - t0
    RESULTS[(row, column)] = cell
    assert cell.ok, cell.note


def teardown_module(module):
    if not RESULTS:
        return
    data = save(RESULTS, FACTS)
    write_section(Path(os.environ.get("EDGEFORGE_ZOO_TABLE", TABLE)), render(data, ROWS))
