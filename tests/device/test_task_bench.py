"""bench of a [task] build on the loopback device: the runner sends the evaluation outputs back
(compressed) and the host computes the task metric into drift.task, the same record (and, the
device being this host, nearly the same figures) as the manifest's verify.task."""
from __future__ import annotations

import pytest
from task_projects import ctc_project

from edgeforge.results.schema import read_result

pytestmark = pytest.mark.device


@pytest.fixture(scope="module")
def ctc_build(tmp_path_factory):
    from edgeforge import api

    root = tmp_path_factory.mktemp("ctc-bench")
    return api.build(ctc_project(root / "proj"), "linux-x86", out=root / "build")


def test_bench_reports_the_task_metric(cli, lab, ctc_build):
    code, out, err = cli("bench", ctc_build.out_dir, "--device", "local", "--inventory", lab.inventory(),
                         "--results", lab.results, "--runs", "3", "--max-metric-drop", "100")
    assert code == 0, err + out
    [path] = lab.result_files()
    r = read_result(path)
    t, v = r["drift"]["task"], ctc_build.manifest["verify"]["task"]
    assert (t["kind"], t["metric"]) == ("ctc", "sequence_accuracy")
    assert t["float"] == v["float"]                       # the same float outputs and labels
    # the device runs onnxruntime's own INT8 kernels; verify, the target's arithmetic: a few
    # sequences may decode differently (TOOLCHAIN 15)
    assert abs(t["artifact"] - v["artifact"]) <= 0.05
    assert t["drop"] == pytest.approx((t["float"] - t["artifact"]) * 100, abs=1e-4)
    assert "max_metric_drop" in out and "ctc sequence_accuracy:" in out
    # a gate over the task metric: the drop as measured holds, a smaller allowance fails (exit 1)
    code, out, err = cli("gate", str(path), "--max-metric-drop", str(max(t["drop"], 0.0)))
    assert code == 0, err + out
    if t["drop"] > 0:
        code, out, err = cli("gate", str(path), "--max-metric-drop", str(t["drop"] / 2))
        assert code == 1 and "sequence_accuracy drop" in out + err, out + err
