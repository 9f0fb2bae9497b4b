"""bench of a [task] build on the loopback device: the runner sends the evaluation outputs back
(compressed) and the host computes the task metric into drift.task, the same record (and, the
device being this host, nearly the same figures) as the manifest's verify.task."""
from __future__ import annotations

import pytest
from task_projects import ctc_project

from result_factory import read_result_doc

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
    r = read_result_doc(path)
    t, v = r["drift"]["task"], ctc_build.manifest["verify"]["task"]
    assert (t["kind"], t["metric"]) == ("ctc", "sequence_accuracy")
    assert t["float"] == v["float"]                       # the same float outputs and labels
    # the device runs onnxruntime's own INT8 kernels; verify, the target's arithmetic: a few
    # sequences may decode differently (TOOLCHAIN 15)
    assert abs(t["artifact"] - v["artifact"]) <= 0.05
    assert t["drop"] == pytest.approx((t["float"] - t["artifact"]) * 100, abs=1e-4)
    assert "max_metric_drop" in out and "CTC accuracy " in out and "drop " in out and "top-1" not in out
    # a gate over the task metric: the drop as measured holds, a smaller allowance fails (exit 1)
    code, out, err = cli("gate", str(path), "--max-metric-drop", str(max(t["drop"], 0.0)))
    assert code == 0, err + out
    if t["drop"] > 0:
        code, out, err = cli("gate", str(path), "--max-metric-drop", str(t["drop"] / 2))
        assert code == 1 and "sequence_accuracy drop" in out + err, out + err


@pytest.fixture(scope="module")
def nms_build(tmp_path_factory):
    """A detector without NMS in its graph (boxes [N, A, 4], scores [N, C, A]) whose
    [postprocess] decodes boxes and runs NMS: on the host in verify, on the device in bench."""
    from task_projects import detector_project

    from edgeforge import api

    root = tmp_path_factory.mktemp("nms-bench")
    proj = detector_project(root / "proj")
    with open(proj / "edgeforge.toml", "a") as fh:
        fh.write('\n[postprocess]\nop = "nms"\nboxes = 0\nscores = 1\nscore_threshold = 0.05\n')
    return api.build(proj, "linux-x86", precision="fp32", out=root / "build")


def test_postprocess_nms_runs_on_the_device_and_its_detections_are_compared(cli, lab, nms_build):
    import json

    v = nms_build.manifest["verify"]["task"]
    assert (v["metric"], v["postprocess"]) == ("map50", "nms") and v["float"] > 0.3
    post = json.loads((nms_build.out_dir / "pipeline.json").read_text())["postprocess"]
    assert post["op"] == "nms" and post["score_threshold"] == 0.05 and post["iou_threshold"] == 0.5
    code, out, err = cli("bench", nms_build.out_dir, "--device", "local", "--inventory", lab.inventory(),
                         "--results", lab.results, "--runs", "3")
    assert code == 0, err + out
    [path] = lab.result_files()
    t = read_result_doc(path)["drift"]["task"]
    assert (t["kind"], t["metric"], t["postprocess"]) == ("detection", "map50", "nms")
    assert t["float"] == v["float"]          # the float outputs through the same NMS on the host
    assert t["artifact"] == pytest.approx(v["artifact"], abs=0.02)   # fp32 on the same CPU kind


def test_a_postprocess_for_another_task_is_refused(tmp_path):
    from task_projects import ctc_project

    from edgeforge import api
    from edgeforge.errors import ConfigError

    proj = ctc_project(tmp_path / "proj")
    with open(proj / "edgeforge.toml", "a") as fh:
        fh.write('\n[postprocess]\nop = "nms"\n')
    with pytest.raises(ConfigError, match=r'op = "nms" gives a detection task\'s answers; \[task\] kind is "ctc"'):
        api.build(proj, "linux-x86", precision="fp32", out=tmp_path / "out")


# make test-slow (17 s in a 28-min make test, its own detector build): the default suite keeps
# NMS run on the device with its detections compared (the test above) and the runner's NMS
# against Paddle's kernel (tests/integration/test_nms3_targets.py)
@pytest.mark.slow
def test_nms_moved_out_of_the_graph_runs_on_the_device(cli, lab, tmp_path, monkeypatch):
    """[backend.onnx] nms = "postprocess" (jetson-orin's; here on an x86 profile, since the
    loopback device is x86_64): the graph ends before its multiclass_nms3 and the runner does
    the NMS on the device with the op's attributes; the host compares the device's detections
    with the float program's own NMS rows."""
    import re
    import shutil

    from task_projects import detector_project

    from edgeforge import api
    from edgeforge.targets import targets_dir

    tdir = tmp_path / "targets"
    shutil.copytree(targets_dir(), tdir)
    text = (tdir / "linux-x86.toml").read_text()
    text = re.sub(r'^name = "linux-x86"', 'name = "x86-nms-post"', text, flags=re.M)
    text = re.sub(r"^(execution_providers = .*)$", r'\1\nnms = "postprocess"', text, count=1, flags=re.M)
    (tdir / "x86-nms-post.toml").write_text(text.replace("family_default = true", "family_default = false"))
    monkeypatch.setenv("EDGEFORGE_TARGETS", str(tdir))
    res = api.build(detector_project(tmp_path / "proj", nms="multiclass"), "x86-nms-post", precision="fp32",
                    out=tmp_path / "build")
    v = res.manifest["verify"]["task"]
    assert res.manifest["nms"]["where"] == "postprocess" and v["postprocess"] == "nms"
    code, out, err = cli("bench", res.out_dir, "--device", "box", "--runs", "3", "--results", lab.results,
                         "--inventory", lab.inventory("box", target="x86-nms-post"))
    assert code == 0, err + out
    [path] = lab.result_files()
    t = read_result_doc(path)["drift"]["task"]
    assert (t["kind"], t["metric"], t["postprocess"]) == ("detection", "map50", "nms")
    assert t["float"] == v["float"]           # Paddle's own NMS rows, as verify read them
    assert t["artifact"] == pytest.approx(v["artifact"], abs=0.02)
