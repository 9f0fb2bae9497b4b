"""The suite models' cells (tests/zoo/test_suite_models.py): how each is judged, and their
section of docs/conformance.md (between the ``<!-- suite-models -->`` markers; the raw cells
in docs/conformance-suite.json, merged run by run, so a selective run keeps the others).

Every cell is an ``edgeforge build`` of an exported program (PIR ``.json`` or legacy
``.pdmodel``) with labelled evaluation data, judged by its task metric: top-1 (PP-LCNet,
PP-HGNetV2), mIoU (PP-LiteSeg), mAP@0.5 (PicoDet-S, NMS in the graph).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import platform
from pathlib import Path

import numpy as np
from zoo_common import COLUMNS, REPO, Cell

ROWS = [f"{m}-{f}" for m in ("pp_lcnet", "pp_hgnetv2", "pp_liteseg", "picodet_s") for f in ("legacy", "pir")]
SUITE_COLUMNS = {**COLUMNS, "jetson-int8": ("jetson-orin int8", dict(target="jetson-orin"))}
JSON = REPO / "docs" / "conformance-suite.json"
BEGIN, END = "<!-- suite-models -->", "<!-- /suite-models -->"
FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8")


def _metric(t: dict) -> str:
    name = {"top1": "top-1", "miou": "mIoU", "map50": "mAP@0.5"}.get(t["metric"], t["metric"])
    return f"{name} {t['artifact']:.3f} (float {t['float']:.3f})"


def host_cell(r, column: str) -> Cell:
    """verify ran the artifact on the host: its status, and the task metric it measured."""
    m = r.manifest
    v, t = m["verify"], m["verify"]["task"]
    fig = _metric(t)
    dets = v.get("detections")
    if dets and dets.get("map50_vs_float") is not None:
        fig += f"; vs float {dets['map50_vs_float']:.3f}, {dets['matched']}/{dets['float_boxes']} boxes"
    if (m.get("quantization") or {}).get("float_weights"):
        fig += f"; {len(m['quantization']['float_weights'])} odd weight(s) float"
    ok = v["status"] == "passed"
    return Cell(ok, fig, note=None if ok else f"{column}: verify {v['status']}: {v.get('reason')}")


def lite_arm_cell(r, int8_dir: Path | None) -> Cell:
    """device-only: the .nb; INT8: Paddle Inference on the fake-quant program that went into
    paddle_lite_opt (simulated INT8), its task metric against the labels, within the budget."""
    from edgeforge.paddle_env import paddle_inference
    from edgeforge.task.evaluate import Task, evaluate

    m = r.manifest
    assert r.verify_status == "device-only" and m["artifact"]["path"].endswith(".nb")
    size = (r.out_dir / m["artifact"]["path"]).stat().st_size
    if int8_dir is None:
        return Cell(True, f"{size / 1e6:.2f} MB (.nb)")
    with np.load(r.out_dir / m["reference"]["inputs"]) as z:
        data = {k: z[k] for k in z.files}
    names = [i["name"] for i in m["inputs"]]
    with np.load(r.out_dir / m["reference"]["outputs"]) as z:
        ref = [z[f"output_{i}"] for i in range(len(z.files))]
    kind = m["verify"]["task"]["kind"]
    rec = evaluate(Task(kind=kind), paddle_inference(int8_dir, {k: data[k] for k in names}), ref,
                   {k: v for k, v in data.items() if k not in names})
    odd = len((m.get("quantization") or {}).get("float_weights") or [])
    ab = m.get("accuracy_budget") or {}
    fig = f"{_metric(rec)} sim., {size / 1e6:.2f} MB" + (f"; {odd} odd weight(s) float" if odd else "")
    if ab.get("keep_float"):
        fig += f"; {len(ab['keep_float'])}/{ab.get('quantizable_layers')} layers float"
    limit = 10.0 if kind == "detection" else 1.0 if kind == "classification" else 5.0
    ok = rec["drop"] <= limit
    return Cell(ok, fig, note=None if ok else f"Lite arm int8: {rec['metric']} drop {rec['drop']:.2f} > {limit:g}")


# ---------------------------------------------------------------------------------- the table


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "?"
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
    return f"{model}; {' '.join(f for f in FLAGS if f in flags) or 'none of ' + '/'.join(FLAGS)}"


def save(results: dict[tuple[str, str], Cell], facts: dict) -> dict:
    """Merge this run's cells into docs/conformance-suite.json (cells not run now keep theirs,
    with their own date)."""
    old = json.loads(JSON.read_text()) if JSON.is_file() else {"cells": [], "facts": {}}
    today = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    cells = {(c["row"], c["column"]): c for c in old["cells"]}
    for (row, col), cell in results.items():
        cells[(row, col)] = {"row": row, "column": col, "date": today, **dataclasses.asdict(cell)}
    data = {"date": today, "machine": platform.machine(), "cpu": cpu_flags(), "cells": list(cells.values()),
            "facts": {**old.get("facts", {}), **facts}}
    JSON.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


def section() -> str:
    """The section from docs/conformance-suite.json ("" before any run): zoo_common.render_table
    keeps it when a complete run rewrites docs/conformance.md."""
    return render(json.loads(JSON.read_text()), ROWS) if JSON.is_file() else ""


def render(data: dict, rows: list[str]) -> str:
    cells = {(c["row"], c["column"]): c for c in data["cells"]}
    notes: list[str] = []

    def mark(c: dict | None) -> str:
        if c is None:
            return "— (not run)"
        text = ("⊘ " if c["limit"] else "✓ " if c["ok"] else "✗ ") + c["figure"]
        if c.get("route"):
            text += f" · {c['route']}"
        if c.get("note"):
            if c["note"] not in notes:
                notes.append(c["note"])
            text += f" [{notes.index(c['note']) + 1}]"
        return text

    lines = ["| model, export | input, float metric | " + " | ".join(h for h, _ in SUITE_COLUMNS.values()) + " |",
             "|" + " --- |" * (len(SUITE_COLUMNS) + 2)]
    for row in rows:
        f = data["facts"].get(row) or {}
        model = f"{f['input']}, {f['metric']} {f['float_accuracy']:.3f} ({f['steps']} steps)" if f else "—"
        lines.append(f"| {row} | {model} | " + " | ".join(mark(cells.get((row, c))) for c in SUITE_COLUMNS) + " |")
    dates = sorted({c["date"] for c in data["cells"]})
    out = [BEGIN, "## Paddle's suite models (issue 45)", "",
           "Generated by `pytest -m zoo tests/zoo/test_suite_models.py` (`make test-zoo`; wheels by "
           "`make suite-models`); raw cells in docs/conformance-suite.json. A selective run updates its own cells.",
           "",
           f"Cells run on {', '.join(dates) or '—'}, {data['machine']}, CPU: {data['cpu']}.",
           "",
           "PP-LCNet x0.5 and PP-HGNetV2-B0 (`paddleclas` 2.6.0) on sklearn's digits at 64x64, PP-LiteSeg/STDC1 "
           "(`paddleseg` 2.8.0) on the digits' stroke masks (2 classes), PicoDet-S (`paddledet` 2.6.0: LCNet "
           "x0.75, CSP-PAN 96, PicoHeadV2, multiclass NMS in the graph) on 256x256 scenes of digits (32-64 px) "
           "pasted on crops of sklearn's sample photos (trained on 128x128 ones); each trained briefly (tests/zoo/suite_models.py) and exported "
           "with `paddle.jit.save`, PIR `.json` and legacy `.pdmodel`. Cells: the task metric of the artifact "
           "(float in brackets) as verify measured it on the host; Lite arm: the `.nb`, INT8 simulated by "
           "Paddle Inference on the fake-quant program. ⊘: an exit-2 refusal before any pass, whose one "
           "line names the command that works; for an export Paddle itself cannot write (PicoDet-S's PIR "
           "trace stops in `multiclass_nms3`), `edgeforge export --pir` of the model's code refuses it in one "
           "line naming the `--legacy` export, and the zoo runs that command as printed (the `-legacy` row "
           "builds its program; docs/export.md fact 26).",
           "", *lines, ""]
    out += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    return "\n".join(out + ["", END, ""])


def write_section(table: Path, section: str) -> None:
    text = table.read_text() if table.is_file() else ""
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END) + 1:]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    table.write_text(text)
