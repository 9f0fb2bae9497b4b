"""issue 23: `--slo-p99-ms nan` was saved as null, and `edgeforge report` then crashed on the whole
results directory (exit 70, report/loadcurve.py:129). A load result with null fields (as that
edgeforge wrote it, or as a runner's nan figures come out) is reported with what it has; one
that is not a load result at all is skipped with a note, not the end of the report."""
from __future__ import annotations

import json

from helpers import run_cli
from result_factory import make_load_result

from edgeforge.results.knee import analyse


def _nulled() -> dict:
    r = make_load_result()
    r["analysis"]["slo_p99_ms"] = None                  # nan, written as null
    r["analysis"]["recommendation"] = {"level": None, "line": "no level meets p99 <= nan ms without errors"}
    r["analysis"]["knees"][0]["knee"] = 99              # no such level
    lv = r["levels"][1]
    lv.update(p99_ms=None, inferences_per_s=None, samples_per_s=None, cpu_util_pct=None, peak_rss_mb=None)
    r["levels"].append(dict(r["levels"][0], mode="open", rate=None, concurrency=4))
    return r


def test_report_reads_a_load_result_with_null_fields(tmp_path):
    d = tmp_path / "results"
    d.mkdir()
    (d / "20261201T000000Z-local-digits-load.json").write_text(json.dumps(_nulled(), indent=2))
    res = run_cli("report", str(d), "--out", str(tmp_path / "report"))
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Load curves" in md and "(the result records no SLO)" in md
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    [entry] = summary["load"]
    assert entry["analysis"]["slo_p99_ms"] is None and entry["analysis"]["knees"][0]["knee"] is None
    assert "<svg" in (tmp_path / "report" / "report.html").read_text()


def test_a_sound_load_result_comes_through_unchanged_beside_a_broken_one(tmp_path):
    d = tmp_path / "results"
    d.mkdir()
    good = make_load_result()
    (d / "a-load.json").write_text(json.dumps(good))
    broken = make_load_result()
    broken["settings"]["duration_s"] = None             # --duration nan, as it would have been written
    (d / "b-load.json").write_text(json.dumps(broken))
    res = run_cli("report", str(d), "--out", str(tmp_path / "report"))
    assert res.returncode == 0, res.stderr
    assert "b-load.json" in res.stderr + res.stdout and "Traceback" not in res.stderr
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    [entry] = summary["load"]
    assert entry["source"].endswith("a-load.json") and entry["analysis"] == good["analysis"]


def test_a_non_finite_slo_never_reaches_the_analysis():
    levels = make_load_result()["levels"]
    for bad in (float("nan"), float("inf"), -1.0):
        try:
            analyse(levels, bad)
        except ValueError as exc:
            assert "slo_p99_ms" in str(exc)
        else:
            raise AssertionError(f"analyse took slo_p99_ms={bad}")
