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
    assert v.line.startswith("INT8 1.5") and "faster than fp32, -0.3 points: ship INT8" in v.line


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
    1x, is "not significant": the line says which, so "p=0.037" does not read as a contradiction."""
    from edgeforge.report.verdict import why_not_significant

    under = {"verdict": "not significant", "ratio": 0.995, "p_value": 0.01, "min_change": 0.01,
             "reason": "below the 1% practical threshold though p=0.01"}
    v = int8_verdict(under, accuracy_drop=0.0)
    assert "not significant (under the 1% threshold, p=0.01)" in v.line, v.line
    wide = {"verdict": "not significant", "ratio": 1.03, "p_value": 0.037, "min_change": 0.01,
            "reason": "the confidence interval of the ratio includes 1"}
    assert why_not_significant(wide) == "interval includes 1x, p=0.037"
    assert why_not_significant({"p_value": 0.24, "reason": "Mann-Whitney p=0.24 >= 0.05"}) == "p=0.24"


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
