"""edgeforge.load/1: written by the model and checked as plain JSON, then read back; other
versions refused; never overwritten. The document comes from tests/result_factory.py."""
from __future__ import annotations

import json

import pytest
from result_factory import make_load_result

from edgeforge.errors import ResultError
from edgeforge.results.load import LoadResult, read_load_result, write_load_result


def test_round_trip(tmp_path):
    r = make_load_result()
    p = write_load_result(tmp_path, r)
    assert p.name.endswith("-load.json")
    # the file, read as plain JSON (no model): every field as given, the schema named literally
    on_disk = json.loads(p.read_text())
    assert on_disk == r and on_disk["schema"] == "edgeforge.load/1"
    assert [(lv["concurrency"], lv["inferences_per_s"], lv["p99_ms"]) for lv in on_disk["levels"]] == [
        (1, 100.0, 2.0), (2, 190.0, 2.2), (4, 195.0, 4.0)]
    assert on_disk["artifact"]["sha256"] == "ab" * 32 and on_disk["device"]["name"] == "local"
    # and read back through the model: the same document, nothing added or dropped
    back = read_load_result(p)
    assert back == on_disk
    assert LoadResult.check(back).to_json() == on_disk


@pytest.mark.parametrize("schema", ["edgeforge.load/2", "edgeforge.bench/1", None])
def test_other_schemas_are_refused(tmp_path, schema):
    p = tmp_path / "x.json"
    p.write_text(json.dumps(make_load_result(schema=schema)))
    with pytest.raises(ResultError, match="unknown load result schema|a bench result .*, not a load result"):
        read_load_result(p)


def test_bad_level_is_named(tmp_path):
    r = make_load_result()
    r["levels"][1]["mode"] = "sideways"
    with pytest.raises(ResultError, match="levels.1.mode"):
        LoadResult.check(r)
    r = make_load_result()
    r["levels"][0]["p99_ms"] = float("inf")
    with pytest.raises(ResultError, match="p99_ms"):
        LoadResult.check(r)


def test_never_overwritten(tmp_path):
    a = write_load_result(tmp_path, make_load_result())
    b = write_load_result(tmp_path, make_load_result())
    assert a != b and a.exists() and b.exists()
    inc = write_load_result(tmp_path, make_load_result(status="incomplete", error="lost"))
    assert inc.name.endswith("-load-incomplete.json")


def test_report_draws_load_curves_beside_bench_results(tmp_path):
    from result_factory import make_result

    from edgeforge.report.load import load_results
    from edgeforge.report.report import write_report
    from edgeforge.results.schema import write_result

    d = tmp_path / "results"
    bench = write_result(d, make_result())
    load = write_load_result(d, make_load_result())
    write_load_result(d, make_load_result(status="incomplete", error="lost"))
    # the bench loaders (gate, compare's history) skip load results in a directory
    assert [p for p, _ in load_results([d])] == [bench]
    out = write_report([d], tmp_path / "report")
    s = out["summary"]
    assert len(s.results) == 1 and [e.source for e in s.load] == [str(load)]
    assert s.load[0].analysis.recommendation.level == 1
    assert any("incomplete load run" in x.reason for x in s.skipped)
    md = out["markdown"].read_text()
    assert "## Load curves" in md and "threads 2, batch 1, 2 concurrent requests: 190 inf/s" in md
    assert "Knee (shared session, threads 2, batch 1)" in md
    html = out["html"].read_text()
    assert html.count("<svg") >= 2 and 'id="load"' in html
    # load results alone make a report; nothing complete is an error
    assert write_report([load], tmp_path / "r2")["summary"].results == []
    with pytest.raises(ResultError, match="incomplete"):
        write_report([d / sorted(p.name for p in d.glob("*incomplete*"))[0]], tmp_path / "r3")
