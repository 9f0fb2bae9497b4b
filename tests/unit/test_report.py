"""edgeforge report: Markdown, self-contained HTML and summary.json from result files (no paddle)."""
from __future__ import annotations

import json
import re

import pytest
from result_factory import demo_results, make_result, write_demo

from edgeforge.cli import main
from edgeforge.errors import ConfigError, ResultError
from edgeforge.report.report import REPORT_SCHEMA, write_report


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    files = write_demo(root / "results")
    out = write_report([root / "results"], root / "out")
    return files, out


def test_writes_three_files_and_nothing_else(rendered):
    _, out = rendered
    names = sorted(p.name for p in out["markdown"].parent.iterdir())
    assert names == ["report.html", "report.md", "summary.json"]


def test_summary_json_is_versioned_and_pairs_int8_with_fp32(rendered):
    _, out = rendered
    s = json.loads(out["summary_json"].read_text())
    assert s["schema"] == REPORT_SCHEMA == "edgeforge.report/1"
    assert len(s["results"]) == 5 and len(s["fingerprints"]) == 2
    pairs = s["int8_vs_float"]
    assert len(pairs) == 3 and all(p["float"] for p in pairs)
    rpi = next(p for p in pairs if p["target"] == "rpi4")
    assert rpi["speedup"] == pytest.approx(5.4 / 3.1, rel=0.03)
    assert rpi["compare"]["verdict"] == "faster" and rpi["accuracy_drop"] == 0.6
    assert all(e["device"]["fingerprint_id"] in s["fingerprints"] for e in s["results"])


def test_markdown_names_every_fingerprint_and_digest(rendered):
    _, out = rendered
    md = out["markdown"].read_text()
    for r in demo_results().values():
        fp = r["device"]["fingerprint"]
        assert fp["cpu_model"] in md and fp["kernel"] in md and fp["governor"] in md
        assert r["artifact"]["sha256"] in md                 # in full, under Artifacts
        assert f"`{r['artifact']['sha256'][:12]}`" in md     # short, in every row that measured it
    s = json.loads(out["summary_json"].read_text())
    for fid in s["fingerprints"]:
        assert md.count(fid) >= 3                            # the Devices table and every row measured there
    for e in s["results"]:
        row = next(line for line in md.splitlines() if line.startswith(f"| {e['id']} | {e['label']}"))
        assert e["device"]["fingerprint_id"] in row and e["artifact"]["short"] in row


def test_html_is_self_contained_and_has_the_plots(rendered):
    _, out = rendered
    html = out["html"].read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert not re.search(r"<(?:script|link|iframe|object|embed)\b", html, re.I)
    assert "@import" not in html and "url(http" not in html
    assert html.count("<svg") == 3                       # latency, int8 vs float, sizes
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))                     # several inline SVGs, no clashing ids
    for r in demo_results().values():
        sha = r["artifact"]["sha256"]
        assert f'title="sha256 {sha}"' in html           # full digest behind the short one
    assert "Cortex-A72 (Raspberry Pi 4 Model B Rev 1.4)" in html


def test_no_int8_and_no_sizes_still_renders(tmp_path):
    r = make_result(precision="fp32", seed=1)
    del r["artifact"]["size_bytes"]
    (tmp_path / "a.json").write_text(json.dumps(r))
    out = write_report([tmp_path / "a.json"], tmp_path / "out")
    html = out["html"].read_text()
    assert "No INT8 results among the inputs." in html and html.count("<svg") == 1
    assert "No INT8 results among the inputs." in out["markdown"].read_text()


def test_directories_skip_our_other_documents_but_not_unknown_results(tmp_path, rendered):
    files, out = rendered
    d = tmp_path / "results"
    d.mkdir()
    (d / "one.json").write_text(files[0].read_text())
    (d / "summary.json").write_text(out["summary_json"].read_text())     # a report written into results/
    (d / ".partial.json").write_text("{")                                # a bench write in progress
    assert len(write_report([d], tmp_path / "o1")["summary"].results) == 1
    assert len(write_report([d, d / "one.json"], tmp_path / "o1")["summary"].results) == 1   # counted once
    future = make_result(seed=1)
    future["schema"] = "edgeforge.bench/2"
    (d / "future.json").write_text(json.dumps(future))
    with pytest.raises(ResultError, match="unknown result schema 'edgeforge.bench/2'"):
        write_report([d], tmp_path / "o2")
    with pytest.raises(ConfigError, match="no result files"):
        (tmp_path / "empty").mkdir()
        write_report([tmp_path / "empty"], tmp_path / "o3")


def test_incomplete_runs_in_a_directory_are_skipped_and_listed(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    d = tmp_path / "results"
    d.mkdir()
    (d / "ok.json").write_text(json.dumps(make_result(seed=1)))
    broken = make_result(seed=2)
    broken.update(status="incomplete", samples_ms=[], error="device pi-lab-3: connection lost")
    (d / "broken-incomplete.json").write_text(json.dumps(broken))
    out = write_report([d], tmp_path / "out")
    assert len(out["summary"].results) == 1
    assert out["summary"].skipped[0].reason.startswith("an incomplete run (status 'incomplete'")
    assert "skipped " in out["markdown"].read_text() and "connection lost" in out["html"].read_text()
    assert main(["gate", str(d), "--max-p50-ms", "100"]) == 0
    assert "skipped" in capsys.readouterr().err
    assert main(["gate", str(d / "broken-incomplete.json"), "--max-p50-ms", "100"]) == 2   # named: refused
    assert "incomplete run" in capsys.readouterr().err


def test_rewriting_keeps_other_files_and_leaves_no_temporaries(tmp_path, rendered):
    files, _ = rendered
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    write_report(files[:2], out)
    write_report(files, out)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "report.html", "report.md", "summary.json"]
    assert len(json.loads((out / "summary.json").read_text())["results"]) == len(files)


def test_nan_in_a_result_file_is_refused_naming_the_field(tmp_path):
    """edgeforge writes a NaN it measured as null (write_result); a file holding NaN or
    Infinity was not written by it: exit 2 naming the file and the field (issue 44)."""
    from edgeforge.errors import ResultError
    from edgeforge.results.schema import read_result, write_result

    r = make_result(seed=1)
    r["summary"]["peak_rss_mb"] = float("nan")
    written = write_result(tmp_path / "ours", r)
    assert read_result(written).summary.peak_rss_mb is None
    (tmp_path / "a.json").write_text(json.dumps(r))                      # json writes NaN by default
    with pytest.raises(ResultError, match=r"a.json: 'summary.peak_rss_mb': Input should be a finite number"):
        write_report([tmp_path / "a.json"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_report_prints_the_paths_and_a_table(tmp_path, capsys, monkeypatch, rendered):
    files, _ = rendered
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["report", *map(str, files), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    for name in ("report.md", "report.html", "summary.json"):
        assert str(tmp_path / "r" / name) in out
    assert "digits/rpi4/lite/int8" in out and "vs fp32" in out
    assert main(["report", str(tmp_path / "missing.json")]) == 2


def test_the_verdict_comes_first_once_per_model_target_and_device(tmp_path, rendered):
    """What to ship leads the report, one row per model/target/device even with a rerun; a
    slower INT8 run: ship fp32, and --precision auto picks fp32 (issues 18, 46)."""
    _, out = rendered
    md = out["markdown"].read_text()
    assert md.index("## What to ship") < md.index("## Latency and task metric") < md.index("## INT8 vs float")
    ship = md.split("## What to ship", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in ship.splitlines() if ln.startswith("| digits/")]
    assert len(rows) == 2          # rpi4 (an INT8 run and its rerun) and jetson-orin: each once
    assert any("pi-lab-3 | INT8 |" in ln and "faster than fp32, top-1 accuracy drop 0.6 points: ship INT8" in ln
               for ln in rows)
    assert md.count("top-1 accuracy drop 0.6 points: ship INT8") == 1
    slow = {"int8": make_result(median_ms=6.6, seed=1), "fp32": make_result(precision="fp32", median_ms=5.1, seed=2)}
    for stem, r in slow.items():
        (tmp_path / f"{stem}.json").write_text(json.dumps(r))
    s = write_report([tmp_path / "int8.json", tmp_path / "fp32.json"], tmp_path / "out")["summary"]
    (pair,) = s.int8_vs_float
    assert pair.verdict.ship == "fp32" and pair.verdict.speed == "slower"
    html = (tmp_path / "out" / "report.html").read_text()
    assert "0.77x of fp32 (slower) on this device" in html and "--precision auto picks fp32" in html


def test_profiled_runs_get_a_table_and_a_plot(tmp_path):
    r = make_result(median_ms=3.1, seed=1)
    r["profile"] = {"total_ms": 2.5, "nodes": 3, "runs": 30,
                    "by_op": [{"op": "QLinearConv", "ms": 2.0, "nodes": 2, "share": 0.8},
                              {"op": "QuantizeLinear", "ms": 0.5, "nodes": 1, "share": 0.2}],
                    "by_node": []}
    (tmp_path / "r.json").write_text(json.dumps(r))
    out = write_report([tmp_path / "r.json"], tmp_path / "out")
    md, html = out["markdown"].read_text(), out["html"].read_text()
    assert "## Per-op profiles" in md and "QLinearConv 80%, QuantizeLinear 20%" in md and "| 20.0% |" in md
    assert 'id="opp-' in html and "share of profiled time" in html
