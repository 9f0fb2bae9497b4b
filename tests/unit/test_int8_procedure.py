"""One verdict procedure for build and bench (edgeforge.report.int8_procedure), on synthetic
timings shaped like the host's: a load that drifts from round to round, heavy right tails, and
a few percent between two separate runs of the same model."""
from __future__ import annotations

import numpy as np
import pytest
from result_factory import make_result

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


def _bench_result(rounds_ms: dict[str, list[float]] | None, samples_ms: list[float], precision: str = "int8") -> dict:
    """A bench result (tests/result_factory.py's shape) with the device's interleaved rounds."""
    r = make_result(precision=precision, samples=samples_ms)
    if rounds_ms is not None:
        r["int8_vs_fp32"] = {"fp32_samples_ms": rounds_ms["fp32"], "int8_samples_ms": rounds_ms["int8"],
                             "rounds": len(rounds_ms["fp32"])}
    return r


def test_bench_decides_on_its_own_interleaved_rounds_not_on_an_earlier_run():
    """An INT8 bench that timed its fp32 sibling in interleaved rounds on the device decides on
    them, with the same procedure as the build, and says so; an earlier fp32 run in the pool that
    ran under another load (here 30 % slower: it would read as a speed-up) is not used. Without
    the rounds, the pool's run decides and the line says "separate runs"."""
    from edgeforge.report.verdict import result_verdict

    for seed in range(6):
        same = rounds({"fp32": 1.0, "int8": 1.0}, seed=seed)
        stale_fp32 = _bench_result(None, separate_run(1.3, 1.0, seed=seed + 50), precision="fp32")
        int8 = _bench_result(same, separate_run(1.0, 1.0, seed=seed + 60))
        v, why = result_verdict(int8, [stale_fp32])
        assert why == "" and v.speed == "not significant", v.line
        assert "on this device, interleaved with its fp32 sibling" in v.line and "interval" in v.line
        build = int8_verdict(decide(*rounds({"fp32": 1.0, "int8": 1.0}, seed=seed + 7).values()), where="on the host")
        assert agree_or_not_significant(build, v)
        old, _ = result_verdict(_bench_result(None, int8["samples_ms"]), [stale_fp32])
        assert old.speed == "faster" and "on this device, separate runs" in old.line
    fast = rounds({"fp32": 1.0, "int8": 1 / 1.4}, seed=9)
    v, _ = result_verdict(_bench_result(fast, fast["int8"]), [])     # no fp32 run needed at all
    assert v.speed == "faster" and v.ship == "int8" and v.speedup == pytest.approx(1.4, rel=0.05)


def test_the_runner_interleaves_rounds_rotating_the_order():
    """The device side: every round times each model once, the first model of a round rotating,
    after the same warm-ups for each (edgeforge.runner.timing.interleaved_rounds)."""
    from edgeforge.runner import timing as runner

    calls: list[str] = []

    def model(name):
        def run(feeds):
            calls.append(name)
            return [feeds["x"] * 2]
        return run

    got = runner.interleaved_rounds({"fp32": model("fp32"), "int8": model("int8")}, {"x": np.ones((1, 2))}, 2, 5)
    assert calls[:4] == ["fp32", "int8", "fp32", "int8"]               # warm-ups
    assert calls[4:] == ["fp32", "int8", "int8", "fp32", "fp32", "int8", "int8", "fp32", "fp32", "int8"]
    assert [len(got[k]) for k in ("fp32", "int8")] == [5, 5] and all(x >= 0 for x in got["fp32"] + got["int8"])


def test_the_runner_refuses_a_baseline_it_has_not_checked():
    from edgeforge.runner import limits as runner

    spec = {"files": {"model.onnx": "0" * 64}, "runs": 5}
    assert runner._check_bench(dict(spec, baseline={"path": "float/model.onnx"})).startswith("baseline")
    assert runner._check_bench(dict(spec, baseline="x")).startswith("baseline")
    assert runner._check_bench(dict(spec, files={**spec["files"], "float/model.onnx": "1" * 64},
                                    baseline={"path": "float/model.onnx"})) is None


def test_the_report_judges_a_pair_on_its_rounds_as_bench_does(tmp_path):
    """`edgeforge report` gives the verdict bench gave: an INT8 run with interleaved rounds is
    judged on them (the stale fp32 run stays in the row for its p50, not for the verdict); the
    same run without rounds is judged against the fp32 run; rounds from an emulated device are
    not performance figures and decide nothing."""
    import json

    from edgeforge.report.report import build_summary
    from edgeforge.report.verdict import result_verdict

    same = rounds({"fp32": 1.0, "int8": 1.0}, seed=3)
    stale_fp32 = _bench_result(None, separate_run(1.3, 1.0, seed=53), precision="fp32")
    int8 = _bench_result(same, separate_run(1.0, 1.0, seed=63))

    def pair_of(*results):
        loaded = []
        for i, r in enumerate(results):
            path = tmp_path / f"r{i}.json"
            path.write_text(json.dumps(r))
            loaded.append((path, r))
        [pair] = build_summary(loaded).int8_vs_float
        return pair

    p = pair_of(stale_fp32, int8)
    bench, _ = result_verdict(int8, [stale_fp32])
    assert p.interleaved and p.float_ is not None and p.verdict.line == bench.line
    assert p.compare.verdict == "not significant" and "interleaved with its fp32 sibling" in p.verdict.line
    alone = pair_of(int8)                                   # no fp32 run among the inputs at all
    assert alone.float_ is None and alone.verdict.line == bench.line
    plain = {k: v for k, v in int8.items() if k != "int8_vs_fp32"}
    old = pair_of(stale_fp32, plain)
    assert not old.interleaved and old.compare.verdict == "faster" and "separate runs" not in old.verdict.line
    emu = json.loads(json.dumps(int8))
    emu["device"]["fingerprint"]["emulated"] = "qemu-user"
    assert pair_of(emu).verdict is None                     # nothing to judge: no fp32 run, rounds emulated


@pytest.mark.parametrize("rounds_doc", [{"fp32_samples_ms": ["x"], "int8_samples_ms": [1.0]},
                                        {"fp32_samples_ms": [-1.0], "int8_samples_ms": [1.0]},
                                        {"fp32_samples_ms": [1.0, 2.0], "int8_samples_ms": [1.0]},
                                        "boom"])
def test_crafted_rounds_are_exit_2_naming_the_field(tmp_path, rounds_doc):
    """The rounds decide a verdict, so `report` parses them by their model first: a crafted
    int8_vs_fp32 is exit 2 naming the file and the field, never an internal error."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    r = make_result(precision="int8")
    r["int8_vs_fp32"] = rounds_doc
    path = tmp_path / "r.json"
    path.write_text(json.dumps(r))
    res = subprocess.run([str(Path(sys.executable).with_name("edgeforge")), "report", str(path), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "int8_vs_fp32" in res.stderr and str(path) in res.stderr and "internal error" not in res.stderr
