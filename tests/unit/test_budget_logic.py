"""edgeforge.quant.budget: the criterion (as verify judges) and the fallback order.

``fit_budget`` is driven here by plain functions standing for "quantize" and "evaluate", so
that the order of attempts can be checked exactly; the real quantizers are exercised in
tests/integration/test_budget.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeforge.quant.budget import Budget, SearchLimits, fit_budget, worst_cosine

LAYERS = [f"conv{i}" for i in range(10)]


def _driver(cosine_of):
    """quantize(algo, keep) -> a 'model' path naming its settings; evaluate reads them back."""
    made = []

    def quantize(algo, keep):
        made.append((algo, tuple(keep)))
        return Path(f"{algo}-{len(keep)}")

    def evaluate(model: Path) -> dict:
        algo, kept = made[-1]
        return {"accuracy_drop": 0.0, "cosine": cosine_of(algo, kept)}

    def rank(_model):
        return [(name, 20.0 - i) for i, name in enumerate(LAYERS)]

    return quantize, evaluate, rank, made


UNLABELLED = Budget(max_accuracy_drop=1.0, min_cosine=0.99, labelled=False)


def test_met_at_once_is_one_attempt():
    q, e, r, made = _driver(lambda a, k: 0.995)
    _, res = fit_budget(q, e, r, UNLABELLED, ("KL", "hist", "mse"), [])
    assert made == [("KL", ())] and res.met and res.keep_float == [] and res.algo == "KL"


def test_another_calibration_is_tried_before_any_float_layer():
    q, e, r, made = _driver(lambda a, k: {"KL": 0.95, "hist": 0.992, "mse": 0.97}[a])
    _, res = fit_budget(q, e, r, UNLABELLED, ("KL", "hist", "mse"), [])
    assert made == [("KL", ()), ("hist", ())]        # stops at the first that holds
    assert res.met and res.algo == "hist" and res.keep_float == []
    assert res.initial["cosine"] == 0.95 and res.final["cosine"] == 0.992


def test_float_layers_grow_1_2_4_with_the_best_calibration():
    # every kept layer adds 0.004; hist is the best of the calibrations but misses alone
    q, e, r, made = _driver(lambda a, k: {"KL": 0.95, "hist": 0.97, "mse": 0.96}[a] + 0.004 * len(k))
    _, res = fit_budget(q, e, r, UNLABELLED, ("KL", "hist", "mse"), ["head"], quantizable_layers=11)
    assert [m[0] for m in made] == ["KL", "hist", "mse", "hist", "hist", "hist", "hist", "hist"]
    # base keep + 1, 3, 7 of the ranking; 7 holds (0.998), 3 misses (0.986): bisect 5 (0.994), 4 (0.990)
    assert [len(m[1]) for m in made] == [1, 1, 1, 2, 4, 8, 6, 5]
    assert res.met and res.algo == "hist" and res.keep_float == ["head", *LAYERS[:4]]
    assert res.final["cosine"] == pytest.approx(0.99)
    assert res.to_json()["quantizable_layers"] == 11 and res.to_json()["criterion"] == "cosine"
    assert [a["kept"] for a in res.attempts] == [1, 1, 1, 2, 4, 8, 6, 5]


def test_bisection_keeps_the_model_of_the_fewest_layers_that_hold():
    # holds from 6 ranked layers on; the doubling reaches 7, bisection comes back to 6 (not 5)
    q, e, r, made = _driver(lambda a, k: 0.99 if len(k) >= 6 else 0.9)
    model, res = fit_budget(q, e, r, UNLABELLED, ("KL",), [])
    assert [len(m[1]) for m in made] == [0, 1, 3, 7, 5, 6]
    assert res.met and res.keep_float == LAYERS[:6] and model == Path("KL-6")


def test_a_budget_that_cannot_be_met_says_so():
    q, e, r, made = _driver(lambda a, k: 0.5)
    _, res = fit_budget(q, e, r, UNLABELLED, ("KL",), [], SearchLimits(max_seconds=None, max_rounds=3))
    assert not res.met and len(made) == 4 and res.keep_float == LAYERS[:7]


def test_labelled_budget_is_judged_on_accuracy_not_cosine():
    lab = Budget(max_accuracy_drop=1.0, min_cosine=0.99, labelled=True)
    assert lab.met({"accuracy_drop": 0.5, "cosine": 0.5})
    assert not lab.met({"accuracy_drop": 1.5, "cosine": 1.0})
    assert UNLABELLED.met({"accuracy_drop": 50.0, "cosine": 0.991})
    assert not UNLABELLED.met({"accuracy_drop": 0.0, "cosine": 0.989})


def test_measure_takes_the_worst_output():
    rng = np.random.default_rng(0)
    ref = [rng.standard_normal((8, 10)), rng.standard_normal((8, 5))]
    good = ref[0] + 1e-4 * rng.standard_normal((8, 10))
    bad = ref[1] + 0.5 * rng.standard_normal((8, 5))
    m = UNLABELLED.measure([good, bad], ref, None)
    assert m["cosine"] == pytest.approx(worst_cosine([bad], [ref[1]]), abs=1e-6) and m["cosine"] < 0.99
    assert worst_cosine([good], [ref[0]]) > 0.9999


def test_each_round_is_ranked_on_the_last_attempt():
    """A layer whose loss is hidden behind a worse one (its input already damaged) only shows once
    that one is float: the ranking is taken again on each round's model."""
    ranks = []

    def cosine(a, k):
        return 0.999 if {"conv0", "conv9"} <= set(k) else 0.9

    q, e, _, made = _driver(cosine)

    def rank(model):
        ranks.append(str(model))
        order = LAYERS if str(model) == "KL-0" else ["conv9", *LAYERS[:9]]
        return [(name, 20.0 - i) for i, name in enumerate(order)]

    _, res = fit_budget(q, e, rank, UNLABELLED, ("KL",), [])
    assert ranks == ["KL-0", "KL-1"]
    # and the bisection finds that two of the three hold
    assert [m[1] for m in made] == [(), ("conv0",), ("conv0", "conv9", "conv1"), ("conv0", "conv9")]
    assert res.keep_float == ["conv0", "conv9"] and res.met


def test_a_search_out_of_time_ships_the_best_within_budget_or_says_there_was_none():
    """max_seconds: no attempt starts past it. Each attempt here 'takes' 10 s of a fake clock."""
    import edgeforge.quant.budget as b

    clock = [0.0]

    def slow(cos):
        def cosine_of(a, k):
            clock[0] += 10.0
            return cos(a, k)
        return cosine_of

    real = b.time.perf_counter
    b.time.perf_counter = lambda: clock[0]
    try:
        # holds from 6 float layers; the doubling meets it at 7 (attempt 4, 40 s), then bisects
        q, e, r, made = _driver(slow(lambda a, k: 0.99 if len(k) >= 6 else 0.9))
        lines = []
        model, res = fit_budget(q, e, r, UNLABELLED, ("KL",), [], SearchLimits(max_seconds=35, say=lines.append))
        assert res.met and res.stopped == "max_seconds" and res.keep_float == LAYERS[:7] and model == Path("KL-7")
        assert len(made) == 4 and res.to_json()["max_seconds"] == 35
        assert "best so far: cosine 0.9900 (7 float)" in lines[-1] and "of 35s" in lines[-1]
        clock[0] = 0.0
        q, e, r, made = _driver(slow(lambda a, k: 0.5))
        _, res = fit_budget(q, e, r, UNLABELLED, ("KL",), [], SearchLimits(max_seconds=25))
        assert not res.met and res.stopped == "max_seconds" and len(made) == 3
    finally:
        b.time.perf_counter = real


def test_a_candidate_far_off_on_the_subset_skips_the_whole_set():
    q, e, r, made = _driver(lambda a, k: 0.99 if len(k) >= 6 else 0.9)
    full = []

    def evaluate(model):
        full.append(model)
        return e(model)

    def screen(model):          # the subset: far off below 3 float layers, else "run the whole set"
        return {"accuracy_drop": 0.0, "cosine": 0.5} if len(made[-1][1]) < 3 else None

    model, res = fit_budget(q, evaluate, r, UNLABELLED, ("KL",), [], SearchLimits(max_seconds=None, screen=screen))
    assert res.met and res.keep_float == LAYERS[:6] and model == Path("KL-6")
    assert [a.get("screened", False) for a in res.attempts] == [False, True, False, False, False, False]
    assert Path("KL-1") not in full and len(full) == 5
