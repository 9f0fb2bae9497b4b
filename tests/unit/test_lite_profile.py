"""Paddle Lite's op-time profile as benchmark_bin prints it when Paddle Lite was built with
--with_profile=ON (bench --profile on a benchmark_bin device, issue 18).

No profile-enabled Paddle Lite build exists on this machine: the text comes from
``lite_profile_text``, written the way lite/core/profile/profiler.cc (v2.13-rc) writes it."""
from __future__ import annotations

import pytest

from edgeforge.report.profile import qdq_share, top_ops
from edgeforge.runner.profile import _profile_rows, parse_lite_profile
from lite_profile_text import KERNELS, lite_log

def test_parse_lite_profile_reads_every_kernel_of_the_detailed_summary():
    rows = parse_lite_profile(lite_log())
    assert [r["op"] for r in rows] == [k[0] for k in KERNELS]
    assert [r["node"] for r in rows][:3] == ["calib#0", "conv2d#1", "conv2d#2"]
    assert [r["ms"] for r in rows] == pytest.approx([k[-1] for k in KERNELS], abs=1e-3)
    assert rows[1]["place"] == "kARM/kInt8/kNCHW" and "conv_direct_3x3s1" in rows[1]["kernel"]
    assert rows[0]["kernel"] == "1x1x32x32 1x1x32x32"     # empty columns are padding only
    assert rows[2]["max_ms"] == pytest.approx(0.75, abs=1e-3)


def test_lite_profile_aggregates_per_op_type_with_the_calib_share():
    prof = _profile_rows(parse_lite_profile(lite_log()))
    assert [o["op"] for o in top_ops(prof, 2)] == ["conv2d", "fc"]
    assert prof["by_op"][0] == {"op": "conv2d", "ms": 0.8, "nodes": 2, "share": 0.8}
    assert prof["nodes"] == len(KERNELS) and prof["total_ms"] == pytest.approx(1.0)
    assert qdq_share(prof) == pytest.approx(0.03)           # Paddle Lite's int8 <-> float casts


def test_no_profile_in_a_plain_benchmark_bin_output():
    plain = "======= Perf Info =======\nTime(unit: ms):\ninit  = 12.000\navg   = 1.250\n"
    assert parse_lite_profile(plain) is None
    # a title with nothing under it (a truncated log) gives no rows, not an error
    assert parse_lite_profile("===== Detailed Dispatch Profiler Summary: N/A, Exclude 1 first-epoch =====\n") == []
