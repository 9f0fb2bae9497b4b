"""paddle.vision's hardswish/swish architectures build INT8 for both ONNX target kinds again
(issue 45: they stopped in quantize.onnx with numpy's "Too many bins for data range. Cannot
create 2048 finite-sized bins"; a tensor onnxruntime cannot bin now falls back to its min/max,
edgeforge.quant.degenerate). Trained briefly on sklearn's digits at 32x32 (benchmarks.common), as
the zoo builds them; about two minutes an architecture on 2 cores."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from edgeforge import api

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:          # benchmarks/ is not a package on the test path
    sys.path.insert(0, str(REPO))


@pytest.mark.parametrize("arch", ["mobilenet_v3_small", "shufflenet_v2_swish"])
def test_hardswish_and_swish_nets_build_int8_for_the_onnx_targets(arch, tmp_path):
    from benchmarks.common import digits_project

    root, _ = digits_project(tmp_path / arch, arch, calib=32, evaluation=64)
    for target in ("linux-x86", "jetson-orin"):
        m = api.build(root, target, out=tmp_path / target).manifest
        assert m["precision"] == "int8" and m["verify"]["status"] == "passed", m["verify"].get("reason")
        assert m["verify"]["cosine"] >= 0.99, m["verify"]
        fallen = (m["quantization"].get("degenerate_ranges") or {}).get("tensors", {})
        assert all(why for why in fallen.values()), fallen       # each one says why it was not binned
