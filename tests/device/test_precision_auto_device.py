"""edgeforge run --precision auto on the loopback device: every precision linux-x86 allows is
built and benched on the device, one tagged result each; the chosen build is left where --out
says with decision.json, and the chosen result carries the decision (issue 18)."""
from __future__ import annotations

import json

import pytest

from edgeforge.report.verdict import choose
from edgeforge.results.schema import read_result

pytestmark = pytest.mark.device


def test_run_precision_auto_benches_each_candidate_and_keeps_one(cli, lab, builds, tmp_path):
    code, out, err = cli("run", builds.project, "--target", "linux-x86", "--device", "local",
                         "--inventory", lab.inventory(), "--results", lab.results, "--precision", "auto",
                         "--out", tmp_path / "b", "--runs", "30", "--warmups", "2", "-q")
    assert code == 0, err
    results = [read_result(p) for p in lab.result_files()]
    assert sorted(r["precision_auto"]["candidate"] for r in results) == ["fp16", "fp32", "int8"]
    assert len({r["precision_auto"]["id"] for r in results}) == 1
    decision = json.loads((tmp_path / "b" / "decision.json").read_text())
    assert decision["where"] == "local" and decision["chosen"] in ("fp32", "fp16", "int8")
    assert [c["precision"] for c in decision["candidates"]] == ["fp32", "fp16", "int8"]
    assert all(c["compare"]["labels"] == ["fp32", c["precision"]] for c in decision["candidates"][1:])
    # the choice is the verdict module's, and the chosen build is the one left in --out
    assert choose(decision["candidates"])["precision"] == decision["chosen"]
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["precision"] == decision["chosen"]
    [chosen] = [r for r in results if "decision" in r]
    assert chosen["artifact"]["precision"] == decision["chosen"] == chosen["precision_auto"]["candidate"]
    assert chosen["artifact"]["sha256"] == manifest["artifact"]["sha256"]
    assert f"precision auto (device local): {decision['chosen']}" in out.replace("\n", " ")
