"""The runner's load generator, called directly: a failed run is counted, not a crash; the
open loop's arrivals are Poisson at the asked rate."""
from __future__ import annotations

import time

from edgeforge.runner.load import _Arrivals, _poisson, _work


def test_a_failed_run_is_counted_not_a_crash():
    n = {"calls": 0}

    def call():
        n["calls"] += 1
        time.sleep(0.001)
        if n["calls"] % 3 == 0:
            raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : bad input\nmore")

    t0 = time.perf_counter()
    out = _work(call, t0 + 0.02, t0 + 0.2)
    measured = len(out["lat"]) + out["errors"]
    assert out["errors"] > 0 and len(out["lat"]) > out["errors"]
    assert out["error"] == "RuntimeError: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : bad input"
    assert measured < n["calls"]                         # the warm-up's calls are not counted
    assert all(x >= 0.001 for x in out["lat"])


def test_open_loop_waits_for_arrivals_and_counts_queueing():
    t0 = time.perf_counter() + 0.01
    times = list(_poisson(200.0, t0, t0 + 1.0, seed=7))
    assert 150 < len(times) < 250 and times == sorted(times)
    arrivals = _Arrivals(200.0, t0, t0 + 1.0, seed=7)
    out = _work(lambda: time.sleep(0.008), t0, t0 + 1.0, arrivals, 0.2)
    # 200/s against 8 ms of service: the queue grows (latency from arrival exceeds the service
    # time) until it is 0.2 s behind, when the worker leaves the rest unserved
    assert len(out["lat"]) < len(times)
    assert max(out["lat"]) > 0.05 and min(out["lat"]) >= 0.008
    assert arrivals.finish() == len(times)          # the same stream; the unserved ones counted too
