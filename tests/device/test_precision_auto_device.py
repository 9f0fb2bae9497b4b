"""edgeforge run --precision auto on the loopback device: every precision linux-x86 allows is
built and benched on the device, one tagged result each; the chosen build is left where --out
says with decision.json, and the chosen result carries the decision (issue 18)."""
from __future__ import annotations

import json

import pytest

from result_factory import read_result_doc

pytestmark = pytest.mark.device


def test_run_precision_auto_benches_each_candidate_and_keeps_one(cli, lab, builds, tmp_path):
    code, out, err = cli("run", builds.project, "--target", "linux-x86", "--device", "local",
                         "--inventory", lab.inventory(), "--results", lab.results, "--precision", "auto",
                         "--out", tmp_path / "b", "--runs", "30", "--warmups", "2", "-q")
    assert code == 0, err
    results = [read_result_doc(p) for p in lab.result_files()]
    assert sorted(r["precision_auto"]["candidate"] for r in results) == ["fp16", "fp32", "int8"]
    assert len({r["precision_auto"]["id"] for r in results}) == 1
    decision = json.loads((tmp_path / "b" / "decision.json").read_text())
    assert decision["where"] == "local" and decision["chosen"] in ("fp32", "fp16", "int8")
    assert [c["precision"] for c in decision["candidates"]] == ["fp32", "fp16", "int8"]
    assert all(c["compare"]["labels"] == ["fp32", c["precision"]] for c in decision["candidates"][1:])
    # the documented rule, written out here rather than asked of the verdict module: the fastest
    # candidate that meets the budget and that compare calls significantly faster than fp32; fp32
    # when there is none. The p50s are the bench results' own medians.
    by_result = {r["precision_auto"]["candidate"]: r for r in results}
    p50 = {c["precision"]: c["p50_ms"] for c in decision["candidates"]}
    for prec, r in by_result.items():
        assert p50[prec] == pytest.approx(r["summary"]["p50_ms"], rel=1e-3, abs=1e-3)
    wins = [c["precision"] for c in decision["candidates"][1:]
            if c["met"] and c["compare"]["verdict"] == "faster"]
    expected = min(wins, key=p50.__getitem__) if wins else "fp32"
    assert decision["chosen"] == expected, decision
    if expected != "fp32":
        assert p50[expected] < p50["fp32"]
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["precision"] == decision["chosen"]
    [chosen] = [r for r in results if "decision" in r]
    assert chosen["artifact"]["precision"] == decision["chosen"] == chosen["precision_auto"]["candidate"]
    assert chosen["artifact"]["sha256"] == manifest["artifact"]["sha256"]
    assert f"precision auto (device local): {decision['chosen']}" in out.replace("\n", " ")
