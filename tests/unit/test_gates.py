"""Quality gates and their JUnit XML (no paddle)."""
from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET

import pytest
from result_factory import ORIN, make_result

from edgeforge.cli import main
from edgeforge.cli._common import add_gate_arguments, gate_verdict
from edgeforge.errors import ConfigError, GateFailed
from edgeforge.report.gates import evaluate_gates
from edgeforge.report.junit import write_junit


def fleet() -> list[dict]:
    return [
        make_result(precision="int8", median_ms=3.1, seed=1),
        make_result(precision="fp32", median_ms=5.4, seed=2),
        make_result(target="jetson-orin", backend="onnx", device="orin-1", fingerprint=ORIN, precision="int8",
                    median_ms=0.9, seed=3, accuracy_drop=1.7),
        make_result(target="jetson-orin", backend="onnx", device="orin-1", fingerprint=ORIN, precision="fp32",
                    median_ms=1.0, seed=4),
    ]


def by(gates, name, device):
    return [g for g in gates if g.name == name and g.device == device]


def test_every_gate_per_device_and_result():
    gates = evaluate_gates(fleet(), max_accuracy_drop=1.0, max_p50_ms=4.0, min_int8_speedup=1.5)
    assert len(gates) == 2 * 2 + 2 * 2 + 2      # accuracy and p50 per run, speed-up per int8 run
    assert [g.passed for g in by(gates, "max_accuracy_drop", "orin-1")] == [False, True]   # int8 drops 1.7
    assert [g.passed for g in by(gates, "max_p50_ms", "pi-lab-3")] == [True, False]
    (pi,) = by(gates, "min_int8_speedup", "pi-lab-3")
    assert pi.passed and pi.measured == pytest.approx(5.4 / 3.1, rel=0.03)
    (orin,) = by(gates, "min_int8_speedup", "orin-1")
    assert not orin.passed and "< 1.5x required" in orin.message
    assert all(g.fingerprint.startswith("fp-") and len(g.artifact_sha256) == 64 for g in gates)
    assert len({(g.device, g.case_name) for g in gates}) == len(gates)


def test_missing_measurements_fail_and_say_why():
    int8_only = make_result(precision="int8", seed=1)
    int8_only["drift"] = {"accuracy_drop": None, "skipped": "no evaluation set"}
    gates = evaluate_gates([int8_only], max_accuracy_drop=1.0, min_int8_speedup=1.2)
    assert [g.passed for g in gates] == [False, False]
    assert "no accuracy drop recorded" in gates[0].message and "no evaluation set" in gates[0].message
    assert "no fp32 result of digits/rpi4/lite on pi-lab-3" in gates[1].message
    (none,) = evaluate_gates([make_result(precision="fp32", seed=2)], min_int8_speedup=1.2)
    assert not none.passed and none.measured is None and "no int8 result" in none.message


def test_speedup_pairs_only_the_same_model_on_the_same_device_fingerprint():
    int8 = make_result(precision="int8", median_ms=3.0, seed=1)
    other_model = make_result(name="mnist", precision="fp32", median_ms=6.0, seed=2)
    assert other_model["artifact"]["name"] == "mnist"                # where bench records the model
    other_kernel = make_result(precision="fp32", median_ms=6.0, seed=3,
                               fingerprint={**int8["device"]["fingerprint"], "kernel": "6.6.20-v8+"})
    (g,) = evaluate_gates([int8, other_model, other_kernel], min_int8_speedup=1.2)
    assert not g.passed and "no fp32 result" in g.message
    onnx = make_result(precision="fp32", backend="onnx", runtime=("onnxruntime", "1.23.2"), median_ms=9.0, seed=4)
    (g,) = evaluate_gates([int8, onnx], min_int8_speedup=1.2)
    assert not g.passed and "found fp32 only on onnx (onnxruntime 1.23.2), not comparable" in g.message
    newer_runtime = make_result(precision="fp32", runtime=("paddlelite", "2.14"), median_ms=6.0, seed=5)
    (g,) = evaluate_gates([int8, newer_runtime], min_int8_speedup=1.2)
    assert not g.passed and "same device fingerprint and runtime" in g.message
    old, new = make_result(precision="fp32", median_ms=9.0, seed=6), make_result(precision="fp32", median_ms=6.0, seed=7)
    old["created_at"] = "2024-05-01T00:00:00+00:00"
    (g,) = evaluate_gates([int8, new, old], min_int8_speedup=1.2)
    assert g.measured == pytest.approx(2.0, rel=0.03)          # the newest fp32 run


def test_repeated_runs_get_unique_case_names():
    gates = evaluate_gates([make_result(seed=1), make_result(seed=2)], max_p50_ms=20)
    assert gates[0].case_name != gates[1].case_name and gates[1].subject.endswith("#2")


def test_bad_thresholds_are_usage_errors():
    with pytest.raises(ConfigError):
        evaluate_gates(fleet(), max_p50_ms=-1)


def test_junit_has_one_testcase_per_gate_and_the_failures(tmp_path):
    gates = evaluate_gates(fleet(), max_accuracy_drop=1.0, max_p50_ms=4.0, min_int8_speedup=1.5)
    path = write_junit(gates, tmp_path / "out" / "gates.xml")
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "10" and root.get("failures") == "3"
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"edgeforge.gates.orin-1", "edgeforge.gates.pi-lab-3"}
    cases = list(root.iter("testcase"))
    assert len(cases) == 10
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert len(failed) == 3
    assert any(n.startswith("min_int8_speedup digits/jetson-orin/onnx/int8@") for n in failed)
    assert all(c.get("classname").startswith("edgeforge.gates.") for c in cases)
    assert not list(tmp_path.joinpath("out").glob(".*"))     # no temporary left behind


def _results_dir(tmp_path, results):
    d = tmp_path / "results"
    d.mkdir()
    for i, r in enumerate(results):
        (d / f"r{i}.json").write_text(json.dumps(r))
    return d


def test_cli_gate_fails_with_exit_1_and_writes_junit(tmp_path, capsys):
    d = _results_dir(tmp_path, fleet())
    junit = tmp_path / "junit.xml"
    rc = main(["gate", str(d), "--max-p50-ms", "4", "--min-int8-speedup", "1.5", "--junit", str(junit)])
    assert rc == 1
    out, err = capsys.readouterr()
    assert "quality gates" in out and "FAIL" in out
    assert err.startswith("error: 2 of 6 gates failed")
    root = ET.parse(junit).getroot()
    assert len(list(root.iter("testcase"))) == 6 and len(list(root.iter("failure"))) == 2
    assert main(["gate", str(d), "--max-p50-ms", "100"]) == 0


def test_cli_gate_without_a_gate_is_a_usage_error(tmp_path, capsys):
    d = _results_dir(tmp_path, fleet())
    assert main(["gate", str(d)]) == 2
    assert "no gate given" in capsys.readouterr().err


def test_gate_verdict_is_reusable_by_other_verbs(capsys):
    p = argparse.ArgumentParser()
    add_gate_arguments(p)
    assert gate_verdict(p.parse_args([]), fleet()) is None                 # nothing asked: nothing checked
    failed = gate_verdict(p.parse_args(["--max-accuracy-drop", "1"]), fleet())
    assert isinstance(failed, GateFailed) and failed.exit_code == 1
    assert [g.device for g in failed.gates] == ["orin-1"]
    assert gate_verdict(p.parse_args(["--max-accuracy-drop", "2"]), fleet()) is None
    with pytest.raises(ConfigError, match="--junit needs a gate"):
        gate_verdict(p.parse_args(["--junit", "x.xml"]), fleet())


def test_unnamed_results_pair_only_when_unambiguous():
    def unnamed(**kw):
        r = make_result(**kw)
        r["artifact"]["name"] = None
        return r

    a8, a32 = unnamed(precision="int8", median_ms=3.0, seed=1), unnamed(precision="fp32", median_ms=6.0, seed=2)
    (g,) = evaluate_gates([a8, a32], min_int8_speedup=1.5)
    assert g.passed and g.subject.startswith("?/rpi4/lite/int8@")
    b8 = unnamed(precision="int8", median_ms=2.0, seed=3, sha256="b" * 64)
    gates = evaluate_gates([a8, a32, b8], min_int8_speedup=1.5)
    assert [g.passed for g in gates] == [False, False]
    assert all("cannot tell which" in g.message for g in gates)


def test_reference_runs_serve_as_counterparts_without_being_gated():
    int8 = make_result(precision="int8", median_ms=3.0, seed=1)
    earlier_fp32 = make_result(precision="fp32", median_ms=6.0, seed=2)
    gates = evaluate_gates([int8], max_p50_ms=4.0, min_int8_speedup=1.5, reference=[earlier_fp32, int8])
    assert [(g.name, g.passed) for g in gates] == [("max_p50_ms", True), ("min_int8_speedup", True)]
    p = argparse.ArgumentParser()
    add_gate_arguments(p)
    assert gate_verdict(p.parse_args(["--min-int8-speedup", "1.5"]), [int8], reference=[earlier_fp32]) is None


def mixed_models(seg_artifact: float = 0.71) -> list[dict]:
    """A classifier, a detector and a segmenter, INT8 on one board (issue 46)."""
    return [make_result(precision="int8", seed=1, accuracy_drop=0.6),
            make_result(name="picodet", precision="int8", seed=2, task=("detection", "map50", 0.52, 0.50)),
            make_result(name="pplite-seg", precision="int8", seed=3,
                        task=("segmentation", "miou", 0.72, seg_artifact))]


def test_drop_budgets_apply_each_in_its_own_metric(tmp_path, capsys):
    for i, r in enumerate(mixed_models()):
        (tmp_path / f"r{i}.json").write_text(json.dumps(r))
    junit = tmp_path / "gates.xml"
    assert main(["gate", str(tmp_path), "--max-metric-drop", "3", "--max-accuracy-drop", "1",
                 "--junit", str(junit)]) == 0
    names = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert sorted(n.split(" ")[0] + " " + n.split(" ")[1] for n in names) == [
        "max_accuracy_drop [top-1", "max_metric_drop [mAP@0.5]", "max_metric_drop [mIoU]"]
    # the segmenter loses 4 points of mIoU: only its gate fails, and says so
    for i, r in enumerate(mixed_models(seg_artifact=0.68)):
        (tmp_path / f"r{i}.json").write_text(json.dumps(r))
    assert main(["gate", str(tmp_path), "--max-metric-drop", "3", "--max-accuracy-drop", "1",
                 "--junit", str(junit)]) == 1
    err = capsys.readouterr().err
    assert "1 of 3 gates failed" in err and "mIoU drop 4.00 points > 3 allowed" in err
    failed = [c for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None]
    assert [c.get("name").split(" ")[1] for c in failed] == ["[mIoU]"]


def test_one_budget_alone_gates_by_meaning():
    runs = mixed_models()
    only_metric = evaluate_gates(runs, max_metric_drop=1.0)       # top-1 is a classifier's metric
    assert [(g.metric, g.passed) for g in only_metric] == [
        ("top-1 accuracy", True), ("mAP@0.5", False), ("mIoU", True)]
    only_top1 = evaluate_gates(runs, max_accuracy_drop=1.0)       # no top-1 for a detector
    assert [g.passed for g in only_top1] == [True, False, False]
    assert "pass --max-metric-drop" in only_top1[1].message and "mAP@0.5" in only_top1[1].message
