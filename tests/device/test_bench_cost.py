"""What a bench sends, on a segmenter of PP-LiteSeg's output size (22 MB of fp32 scores over the
evaluation set): its artifact and at most 8 MB of reference data the first time, nothing the
second time (nor for the INT8 build of the same model: the reference is linked on the device by
its sha256), drift and mIoU computed on the device, the bench done within the default timeout."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from result_factory import read_result_doc

pytestmark = pytest.mark.device

CLASSES, SIZE, IMAGES = 21, 128, 16      # 16 x 21 x 128 x 128 x 4 B = 22 MB of float scores
MB = 1 << 20

FACTORY = '''
import paddle.nn as nn


class Seg(nn.Layer):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2D(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2D(8, 8, 3, padding=1),
                                  nn.ReLU(), nn.Conv2D(8, {classes}, 1))

    def forward(self, x):
        return self.body(x)


def build():
    return Seg()
'''


@pytest.fixture(scope="module")
def segmenter(tmp_path_factory):
    import paddle

    root = tmp_path_factory.mktemp("seg") / "seg"
    root.mkdir()
    (root / "seg.py").write_text(FACTORY.format(classes=CLASSES))
    import sys

    sys.path.insert(0, str(root))
    try:
        import seg
        paddle.seed(0)
        paddle.save(seg.build().state_dict(), str(root / "seg.pdparams"))
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("seg", None)
    rng = np.random.default_rng(0)
    (root / "data").mkdir()
    # smooth images (a random field blurred by upsampling), so the class maps have regions
    def images(n):
        low = rng.standard_normal((n, 3, SIZE // 16, SIZE // 16)).astype("float32")
        return np.ascontiguousarray(low.repeat(16, 2).repeat(16, 3))
    np.savez(root / "data" / "calib.npz", x=images(16))
    np.savez(root / "data" / "eval.npz", x=images(IMAGES))
    (root / "edgeforge.toml").write_text(textwrap.dedent(f"""
        name = "seg"
        [model]
        factory = "seg:build"
        weights = "seg.pdparams"
        [[model.inputs]]
        name = "x"
        shape = [-1, 3, {SIZE}, {SIZE}]
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        [task]
        kind = "segmentation"
        max_metric_drop = 50
        """))
    from edgeforge import api

    out = tmp_path_factory.mktemp("seg-builds")
    fp32 = api.build(root, "linux-x86", precision="fp32", out=out / "fp32")
    int8 = api.build(root, "linux-x86", precision="int8", out=out / "int8")
    return fp32, int8


# make test-slow: about 54 s in a 28-minute `make test` on 2 cores (40 s of it training and building
# the segmenter). The default suite keeps the cheaper tests of each part: the 8 MB cap and the
# PP-LiteSeg-sized sample count (tests/unit/test_reference_data.py), a second bench that sends
# nothing (test_device_bench.py::test_rebench_uploads_nothing_and_keeps_both_results), reference
# data linked on the device by its sha256 (test_deploy.py::test_deploy_v1_v2_rollback_and_releases)
# and a task metric computed on the device (test_task_bench.py::test_bench_reports_the_task_metric).
@pytest.mark.slow
def test_a_segmenter_bench_sends_its_artifact_and_8_mb_once(cli, lab, segmenter):
    fp32, int8 = segmenter
    ref = fp32.manifest["reference"]
    scores = fp32.out_dir / "reference" / "float_outputs.npz"
    with np.load(scores) as z:
        assert z["output_0"].nbytes >= 22 * 10**6             # PP-LiteSeg's 22 MB of outputs
    assert ref["samples"] < ref["evaluation_samples"] == IMAGES and ref["raw_bytes"] <= 8 * MB
    inv = lab.inventory()
    code, out, err = cli("bench", fp32.out_dir, "--device", "local", "--inventory", inv, "--results", lab.results)
    assert code == 0, err
    [first] = [read_result_doc(p) for p in lab.result_files()]
    art = fp32.manifest["artifact"]["size_bytes"]
    [runner] = [n for rel, n in first["transfer"]["bytes_by_file"].items() if rel.startswith("edgeforge_runner-")]
    assert first["transfer"]["uploaded_bytes"] - runner - art <= 8 * MB, first["transfer"]
    assert first["drift"]["samples"] == ref["samples"]
    for k in ("max_abs_error", "mean_abs_error", "cosine"):      # verify's figures on the same samples
        assert first["drift"][k] == pytest.approx(ref["host_drift"][k], abs=1e-6), k
    assert first["drift"]["task"]["metric"] == "miou_vs_float" and first["drift"]["task"]["artifact"] > 0.99
    assert first["drift"]["task"]["samples"] == ref["samples"]
    # the same build again: nothing; the INT8 build: its artifact only (the reference is linked)
    code, out, err = cli("bench", fp32.out_dir, "--device", "local", "--inventory", inv, "--results", lab.results)
    assert code == 0, err
    code, out, err = cli("bench", int8.out_dir, "--device", "local", "--inventory", inv, "--results", lab.results,
                         "--runs", "5")
    assert code == 0, err
    second, third = sorted((read_result_doc(p) for p in lab.result_files() if read_result_doc(p)["created_at"]
                            != first["created_at"]), key=lambda r: r["created_at"])
    assert second["transfer"]["uploaded_bytes"] == 0
    sib = int8.manifest["float_artifact"]          # the float model the INT8 build was quantized from
    assert set(third["transfer"]["files"]) <= {"model.onnx", sib["path"]}, third["transfer"]
    assert {ref["inputs"], ref["outputs"]} <= set(third["transfer"]["linked"])
    assert int8.manifest["reference"]["inputs"] == ref["inputs"]
    # its fp32 sibling goes along (linked when the device holds it by sha256: the fp32 build's own
    # artifact when the two exports agree byte for byte) and is timed with the INT8 model in
    # interleaved rounds on the device; the verdict comes from them
    assert sib["path"] in third["transfer"]["files"] + third["transfer"]["linked"]
    assert third["transfer"]["uploaded_bytes"] <= int8.manifest["artifact"]["size_bytes"] + sib["size_bytes"]
    pair = third["int8_vs_fp32"]
    assert pair["rounds"] == 5 and len(pair["fp32_samples_ms"]) == len(pair["int8_samples_ms"]) == 5
    assert pair["fp32_sha256"] == sib["sha256"] and pair["spinning"] is False
    assert "verdict: INT8 " in out and "on this device, interleaved with its fp32 sibling" in " ".join(out.split())
    # without the sibling: the INT8 run alone, its verdict against the fp32 run above, "separate runs"
    code, out, err = cli("bench", int8.out_dir, "--device", "local", "--inventory", inv, "--results", lab.results,
                         "--runs", "5", "--no-fp32-sibling")
    assert code == 0, err
    fourth = max((read_result_doc(p) for p in lab.result_files()), key=lambda r: r["created_at"])
    assert "int8_vs_fp32" not in fourth and fourth["transfer"]["uploaded_bytes"] == 0
    assert "on this device, separate runs" in " ".join(out.split())
