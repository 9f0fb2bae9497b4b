"""The knee finder and the SLO pick on synthetic throughput-latency curves."""
from __future__ import annotations

import pytest

from edgeforge.results.knee import analyse, figures, knee_index, knees, pick_slo, recommendation_line


def curve(points, **common):
    """Levels of one closed-loop series: (concurrency, inf/s, p99 ms[, errors])."""
    out = []
    for p in points:
        k, tput, p99 = p[:3]
        out.append({"mode": "closed", "sessions": "shared", "threads": 2, "batch": 1, "concurrency": k,
                    "rate": None, "completed": 100, "errors": p[3] if len(p) > 3 else 0,
                    "inferences_per_s": tput, "p99_ms": p99, **common})
    return out


def test_saturating_curve_knee_at_the_last_level_that_paid():
    # 1 -> 2 -> 4 scale; 4 -> 8 adds 4 % while p99 doubles
    pts = [(100, 2.0), (190, 2.2), (330, 3.0), (343, 6.0)]
    assert knee_index(pts) == 2


def test_curve_that_still_scales_has_no_knee():
    assert knee_index([(100, 2.0), (200, 2.1), (390, 2.3), (770, 2.6)]) is None


def test_flat_throughput_with_falling_p99_is_no_knee():
    # noise: throughput flat, but p99 did not rise -> not a knee there
    assert knee_index([(100, 2.0), (104, 1.9), (210, 2.0)]) is None


def test_throughput_that_drops_after_the_peak():
    assert knee_index([(100, 1.0), (180, 1.2), (150, 4.0), (120, 9.0)]) == 1


def test_exactly_ten_percent_gain_is_still_growth():
    assert knee_index([(100, 1.0), (110, 1.5), (111, 2.0)]) == 1


def test_knees_per_series_sorted_by_offered_load():
    levels = curve([(4, 330, 3.0), (1, 100, 2.0), (8, 343, 6.0), (2, 190, 2.2)])
    levels += curve([(1, 300, 8.0), (2, 590, 8.5)], batch=4)
    ks = {k["batch"]: k for k in knees(levels)}
    assert ks[1]["levels"] == [1, 3, 0, 2] and ks[1]["knee"] == 0     # the level at concurrency 4
    assert ks[4]["knee"] is None


def test_open_loop_series_ordered_by_rate():
    levels = [{"mode": "open", "sessions": "shared", "threads": 1, "batch": 1, "concurrency": 4,
               "rate": r, "completed": 50, "errors": 0, "inferences_per_s": t, "p99_ms": p}
              for r, t, p in ((400, 399, 5.0), (100, 100, 1.0), (300, 298, 1.5), (200, 200, 1.1))]
    [k] = knees(levels)
    assert k["levels"] == [1, 3, 2, 0] and k["knee"] is None       # it served every rate


def test_slo_pick_is_highest_throughput_meeting_p99_without_errors():
    levels = curve([(1, 100, 2.0), (2, 190, 2.2), (4, 330, 3.0), (8, 343, 6.0)])
    levels += curve([(1, 300, 8.0), (2, 500, 9.5, 3)], batch=4)     # the 500 one had errors
    assert pick_slo(levels, 10.0) == 3            # 343 inf/s at p99 6.0
    assert pick_slo(levels, 5.0) == 2             # 330 inf/s at p99 3.0 (batch 4 is at p99 8)
    assert pick_slo(levels, 9.9) == 3             # not the 500 inf/s level: it had errors
    assert pick_slo(levels, 1.0) is None


def test_skipped_and_empty_levels_are_ignored():
    levels = curve([(1, 100, 2.0), (2, 190, 2.2)])
    levels.append({"mode": "closed", "sessions": "shared", "threads": 2, "batch": 1, "concurrency": 4,
                   "rate": None, "skipped": "not thread-safe"})
    levels.append({**levels[0], "concurrency": 8, "completed": 0, "p99_ms": None, "inferences_per_s": 0.0})
    [k] = knees(levels)
    assert k["levels"] == [0, 1]
    assert pick_slo(levels, 100) == 1


def test_recommendation_line_copies_into_a_config():
    lv = curve([(3, 412.3, 8.14)], batch=4)[0]
    assert recommendation_line(lv) == "threads 2, batch 4, 3 concurrent requests: 412 inf/s at p99 8.1 ms"
    own = {**lv, "sessions": "own"}
    assert "batch 4, 3 concurrent sessions: 412 inf/s" in recommendation_line(own)
    assert figures({**lv, "p99_ms": 0.0594, "inferences_per_s": 9.87}) == "9.87 inf/s at p99 0.059 ms"
    opn = {**lv, "mode": "open", "rate": 250.0}
    assert recommendation_line(opn).startswith("threads 2, batch 4, 3 workers at 250 req/s:")


@pytest.mark.parametrize("slo, expect", [(None, None), (2.5, "190 inf/s")])
def test_analyse_records_knees_and_pick(slo, expect):
    a = analyse(curve([(1, 100, 2.0), (2, 190, 2.2), (4, 195, 4.0)]), slo)
    assert a["knees"][0]["knee"] == 1 and a["knee_gain"] == 0.10
    if expect is None:
        assert a["recommendation"] is None
    else:
        assert a["recommendation"]["level"] == 1 and expect in a["recommendation"]["line"]


def test_analyse_says_when_no_level_meets_the_slo():
    a = analyse(curve([(1, 100, 2.0)]), 0.5)
    assert a["recommendation"] == {"level": None, "line": "no level meets p99 <= 0.5 ms without errors"}
