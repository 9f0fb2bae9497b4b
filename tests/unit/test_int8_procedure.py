"""One verdict procedure for build and bench (edgeforge.report.int8_procedure), on synthetic
timings shaped like the host's: a load that drifts from round to round, heavy right tails, and
a few percent between two separate runs of the same model."""
from __future__ import annotations

import numpy as np

from edgeforge.report.compare import compare_samples
from edgeforge.report.int8_procedure import MIN_EFFECT, decide, decide_after_selection, interval_text
from edgeforge.report.verdict import int8_verdict


def rounds(p50s: dict[str, float], n: int = 300, seed: int = 0) -> dict[str, list[float]]:
    """Interleaved rounds: one load factor per round for every model, plus each run's own noise."""
    rng = np.random.default_rng(seed)
    load = np.exp(np.cumsum(rng.normal(0, 0.01, n)))          # drifting load, shared by the round
    return {k: list(v * load * rng.lognormal(0, 0.03, n)) for k, v in p50s.items()}


def separate_run(p50: float, offset: float, n: int = 300, seed: int = 0) -> list[float]:
    """One bench run on its own: the model's time, this run's offset, its own drift."""
    rng = np.random.default_rng(seed)
    return list(p50 * offset * np.exp(np.cumsum(rng.normal(0, 0.002, n))) * rng.lognormal(0, 0.03, n))


def _verdicts(true_speedup: float, run_offset: float, seed: int):
    build = rounds({"fp32": 1.0, "int8": 1.0 / true_speedup}, seed=seed)
    b = decide(build["fp32"], build["int8"])
    bench = decide(separate_run(1.0, 1.0, seed=seed + 100), separate_run(1.0 / true_speedup, run_offset, seed=seed + 200))
    return (int8_verdict(b, accuracy_drop=0.0, within_budget=True, where="on the host"),
            int8_verdict(bench, accuracy_drop=0.0, within_budget=True))


def agree_or_not_significant(a, b) -> bool:
    return a.speed == b.speed or "not significant" in (a.speed, b.speed)


def test_build_and_bench_agree_or_one_says_not_significant():
    """No real difference, the bench's INT8 run 3 % slower than its fp32 run by chance (a
    separate run): the same procedure never has one say "faster" and the other "slower"."""
    for seed in range(12):
        for offset in (0.97, 1.0, 1.03):
            host, device = _verdicts(1.0, offset, seed)
            assert agree_or_not_significant(host, device), (seed, offset, host.line, device.line)
            assert host.speed == "not significant" and host.ship == "fp32", host.line


def test_a_real_speed_up_is_faster_in_both_and_each_states_its_interval():
    host, device = _verdicts(1.3, 1.02, seed=3)
    assert host.speed == device.speed == "faster" and host.ship == device.ship == "int8"
    assert "(on the host, 95% interval " in host.line and "(on this device, 95% interval " in device.line
    lo, hi = (float(x.rstrip("x")) for x in interval_text(decide(*rounds({"a": 1.0, "b": 1 / 1.3}, seed=3).values()))
                                        .split()[-1].split("-"))
    assert lo < 1.3 < hi


def test_a_small_offset_between_runs_is_under_the_minimum_effect():
    """With compare's 1 % practical threshold, two separate runs 3 % apart are "significant";
    the verdict's minimum effect calls it what it is."""
    xa, xb = separate_run(1.0, 1.0, seed=1), separate_run(1.0, 1.03, seed=2)
    assert compare_samples(xa, xb, min_change=0.01).verdict == "slower"
    c = decide(xa, xb)
    assert c.verdict == "not significant" and c.min_change == MIN_EFFECT == 0.05


def test_the_fastest_of_several_is_decided_on_fresh_rounds():
    """Four INT8 variants of the same speed as fp32: the fastest of them on the samples that
    chose it looks faster than it is; fresh rounds of fp32 and the chosen one decide."""
    variants = {"fp32": 1.0, **{f"int8 {i}": 1.0 for i in range(4)}}
    biased = fresh_calls = 0
    for seed in range(20):
        s = rounds(variants, n=60, seed=seed)
        best = min((k for k in s if k != "fp32"), key=lambda k: np.median(s[k]))
        biased += np.median(s[best]) < np.median(s["fp32"])
        calls = []

        def retime(seed=seed, calls=calls):
            calls.append(1)
            r = rounds({"fp32": 1.0, "int8": 1.0}, seed=1000 + seed)
            return {"fp32": r["fp32"], "int8": r["int8"]}

        decided, fresh = decide_after_selection(s, best, retime)
        fresh_calls += len(calls)
        assert fresh and decided["fp32"] != s["fp32"]
        assert decide(decided["fp32"], decided["int8"]).verdict == "not significant"
    assert biased >= 14 and fresh_calls == 20          # the selection favours INT8 most times
    one = rounds({"fp32": 1.0, "int8": 0.8}, seed=5)
    decided, fresh = decide_after_selection(one, "int8", None)
    assert not fresh and decided == {"fp32": one["fp32"], "int8": one["int8"]}
