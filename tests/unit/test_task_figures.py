"""The task's own figure in every place a person reads it (issue 46): a detector's mAP, a
segmenter's mIoU with float, artifact and drop in the build summary, bench's output, report.md,
report.html and compare; top-1 only for a classifier. No paddle."""
from __future__ import annotations

import json
import re

import pytest
from result_factory import make_result, task_drift, write_demo

from edgeforge.cli import main
from edgeforge.cli._render import print_build_summary
from edgeforge.cli.bench import print_bench_result
from edgeforge.report.figure import task_figure
from edgeforge.report.report import write_report

TASKS = {"segmentation": ("miou", 0.723, 0.701, "mIoU 70.10% (float 72.30%, drop 2.20 points)"),
         "detection": ("map50", 0.412, 0.398, "mAP@0.5 39.80% (float 41.20%, drop 1.40 points)")}


def manifest(kind: str) -> dict:
    metric, flt, art, _ = TASKS[kind]
    verify = {**task_drift(kind, metric, flt, art), "status": "passed", "rel_max_abs_error": 0.01,
              "runtime": {"name": "onnxruntime", "version": "1.23.2"}}
    return {"name": "m", "target": "linux-x86", "backend": "onnx", "precision": "int8",
            "steps": [{"pass": "verify", "cache_hit": False, "seconds": 1.0}],
            "artifact": {"path": "model.onnx", "size_bytes": 1000, "sha256": "ab" * 32}, "verify": verify}


@pytest.mark.parametrize("kind", TASKS)
def test_build_summary_and_bench_show_the_task_metric(kind, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    print_build_summary(manifest(kind), "build/m-linux-x86", verdict=False)
    out = capsys.readouterr().out
    assert re.search(rf"{kind} +{re.escape(TASKS[kind][3])}", out), out
    assert "top-1" not in out and "accuracy -" not in out
    metric, flt, art, line = TASKS[kind]
    print_bench_result(make_result(task=(kind, metric, flt, art)), "results/x.json")
    out = capsys.readouterr().out
    assert line in out and "top-1" not in out


def test_a_classifier_reads_top1(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    print_bench_result(make_result(accuracy_drop=0.6), "results/x.json")
    out = capsys.readouterr().out
    assert "top-1 accuracy 96.20% (float 96.80%, drop 0.60 points)" in out and "top-1 agreement" in out


def test_report_and_compare_show_map_and_miou(tmp_path, capsys):
    files = write_demo(tmp_path / "results", tasks=True)
    out = write_report(files, tmp_path / "out")
    md, html = out["markdown"].read_text(), out["html"].read_text()
    for doc, sep in ((md, " | "), (html, "</td><td>")):
        assert sep.join(["mIoU", "72.30%", "70.10%", "2.20"]) in doc
        assert sep.join(["mAP@0.5", "41.20%", "39.80%", "1.40"]) in doc
        # the demo's segmenter is 1.02x: under the one 5 % minimum effect (report/int8_procedure.py)
        assert "mIoU drop 2.2 points: no speed-up, ship fp32" in doc and "mAP@0.5 drop 1.4 points" in doc
    by_name = {f.name: f for f in files}
    assert main(["compare", str(by_name["ppliteseg-orin-fp32.json"]), str(by_name["ppliteseg-orin-int8.json"])]) == 0
    assert "mIoU (float 72.30%): A 72.30% -> B 70.10%, drop A 0.00 -> B 2.20 points" in capsys.readouterr().out
    assert main(["compare", "--json", str(by_name["picodet-rpi4-fp32.json"]),
                 str(by_name["picodet-rpi4-int8.json"])]) == 0
    doc = json.loads(capsys.readouterr().out)["task_metric"]
    assert doc["b"]["name"] == "mAP@0.5" and doc["b"]["drop"] == pytest.approx(1.4)


def test_a_figure_needs_a_measurement_to_be_one():
    assert task_figure({"cosine": 0.99, "accuracy": None, "accuracy_drop": None}) is None   # unlabelled
    skipped = task_figure({"task": {"kind": "detection", "metric": "map50", "float": None, "artifact": None,
                                    "drop": None, "skipped": "the runner sent no evaluation outputs"}})
    assert skipped.text() == "mAP@0.5: not measured (the runner sent no evaluation outputs)"


def test_a_device_only_build_shows_the_float_figure(capsys, monkeypatch):
    """An rpi4 build the host cannot run: the summary still names mIoU and its float figure."""
    monkeypatch.setenv("COLUMNS", "80")
    m = manifest("segmentation")
    m["verify"].update(status="device-only", runtime=None)
    m["verify"]["task"].update(artifact=None, drop=None)
    print_build_summary(m, "build/m-rpi4", verdict=False)
    out = capsys.readouterr().out
    assert "mIoU: float 72.30% (the artifact runs on the device only)" in out and "top-1" not in out


def test_fleet_and_sweep_tables_name_a_task_metric_drop():
    from edgeforge.report.figure import drop_cell

    assert drop_cell(make_result(accuracy_drop=0.6)["drift"]) == "0.60"
    assert drop_cell(make_result(task=("detection", "map50", 0.412, 0.398))["drift"]) == "1.40 mAP@0.5"
    assert drop_cell({"cosine": 0.99}) == "-"
