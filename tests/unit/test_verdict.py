"""The INT8 verdict (edgeforge.report.verdict) on real compare statistics: INT8 faster within the
budget ships INT8; slower, not significant, or over the budget ships fp32."""
from __future__ import annotations

import numpy as np
import pytest

from edgeforge.report.compare import compare_samples
from edgeforge.report.verdict import choose, int8_verdict


def samples(p50: float, n: int = 120, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(p50 * (1 + 0.02 * rng.standard_normal(n)))


def test_faster_within_budget_ships_int8():
    c = compare_samples(samples(1.51), samples(1.0, seed=1), labels=("fp32", "int8"))
    v = int8_verdict(c, accuracy_drop=0.3, within_budget=True)
    assert v.ship == "int8" and v.speed == "faster"
    assert v.line.startswith("INT8 1.5") and "faster than fp32, accuracy drop 0.3 points: ship INT8" in v.line


def test_slower_ships_fp32():
    c = compare_samples(samples(0.129), samples(0.167, seed=1))
    v = int8_verdict(c.to_dict(), accuracy_drop=0.0)
    assert v.ship == "fp32" and v.speed == "slower"
    assert "INT8 0.77x of fp32 (slower) on this device" in v.line and v.line.endswith("ship fp32")


def test_not_significant_ships_fp32():
    base = samples(2.0, seed=3)
    c = compare_samples(base, samples(2.0, seed=4))
    v = int8_verdict(c, cosine=0.9991)
    assert v.speed == "not significant" and v.ship == "fp32"
    assert "not significant (p=" in v.line and "cosine 0.9991" in v.line


def test_not_significant_says_why_when_p_is_small():
    """A small p with a change under the practical threshold, or with an interval that includes
    1x, is "not significant": the line names the figure that decided it, never a small p beside
    "not significant" (issue 23: "not significant (interval includes 1x, p=0.046)")."""
    from edgeforge.report.verdict import why_not_significant

    under = {"verdict": "not significant", "ratio": 0.995, "p_value": 0.01, "min_change": 0.01,
             "reason": "below the 1% practical threshold though p=0.01"}
    v = int8_verdict(under, accuracy_drop=0.0)
    assert "not significant (a 0.5% change, under the 1% threshold)" in v.line, v.line
    assert "p=" not in v.line
    wide = {"verdict": "not significant", "ratio": 1.03, "p_value": 0.046, "min_change": 0.01, "alpha": 0.05,
            "ci_low": 0.98, "ci_high": 1.08, "reason": "the confidence interval of the ratio includes 1"}
    # the interval of the speed-up p50(fp32)/p50(int8), as the line's "0.97x of fp32" reads
    assert why_not_significant(wide) == "its 95% interval, 0.93x-1.02x, includes 1x"
    v = int8_verdict(wide, accuracy_drop=0.0, where="on the host")
    assert v.line.startswith("INT8 0.97x of fp32, not significant (its 95% interval, 0.93x-1.02x, "
                             "includes 1x) on the host"), v.line
    assert "p=" not in v.line and v.p_value == 0.046
    no_ci = dict(wide, ci_low=None, ci_high=None, reason="no confidence interval of the ratio could be formed")
    assert why_not_significant(no_ci) == "no 95% interval of the ratio could be formed"
    assert why_not_significant({"p_value": 0.24, "reason": "Mann-Whitney p=0.24 >= 0.05"}) == "p=0.24"


def test_a_real_compare_under_the_threshold_says_so_without_p():
    """compare_samples on two runs 0.5% apart with thousands of samples: p is tiny, the change is
    under the 1% threshold, and the verdict says the threshold."""
    base = samples(2.0, n=4000, seed=5)
    c = compare_samples(base, [x * 1.005 for x in samples(2.0, n=4000, seed=5)])
    assert c.verdict == "not significant" and c.reason.startswith("below the"), c.reason
    v = int8_verdict(c, accuracy_drop=0.0)
    assert "under the 1% threshold, 95% interval " in v.line and "p=" not in v.line, v.line   # states its interval


def test_faster_but_over_budget_ships_fp32():
    c = compare_samples(samples(2.0), samples(1.0, seed=1))
    v = int8_verdict(c, accuracy_drop=2.1, within_budget=False)
    assert v.speed == "faster" and v.ship == "fp32" and "over the accuracy budget" in v.line


def test_no_statistics_gives_no_verdict():
    v = int8_verdict(None, speedup=1.4)
    assert v.speed == "not measured" and v.ship == "fp32" and "1.40x" in v.line


def _cand(prec, p50, met=True, ref=None):
    c = None if ref is None else compare_samples(samples(ref), samples(p50, seed=2)).to_dict()
    return {"precision": prec, "p50_ms": p50, "met": met, "compare": c}


def test_choose_picks_fastest_significant_within_budget():
    pick = choose([_cand("fp32", 10.0), _cand("fp16", 8.0, ref=10.0), _cand("int8", 6.0, ref=10.0)])
    assert pick["precision"] == "int8" and "1.67x faster" in pick["reason"]


def test_choose_keeps_fp32_when_int8_is_slower_or_misses():
    pick = choose([_cand("fp32", 1.0), _cand("int8", 1.3, ref=1.0)])
    assert pick["precision"] == "fp32" and "int8 slower" in pick["reason"]
    pick = choose([_cand("fp32", 1.0), _cand("int8", 0.5, met=False, ref=1.0)])
    assert pick["precision"] == "fp32" and "misses the budget" in pick["reason"]
    with pytest.raises(ValueError):
        choose([_cand("int8", 0.5, ref=1.0)])
