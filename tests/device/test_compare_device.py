"""`edgeforge compare` on real benches over the loopback device: two runs of one artifact are
"not significant"; a genuinely slower artifact (the digits model doing ~4x the convolution work,
see conftest.slow_build) is detected as slower.

The benches run one runtime thread: this box is shared (other test sessions load its 2 cores),
and a 2-thread onnxruntime pool waiting on a preempted sibling adds run-to-run shifts of 10-20%.
With one thread, back-to-back runs of one artifact measured here differ by 0-2.3% under a load
of ~4.7; the same-artifact check therefore uses a 5% practical threshold (``--min-change 5``;
the default 1% flagged 2 of 6 such pairs as "2% slower" under that load). The slower artifact
is ~2.6x slower and is checked at the default threshold.

The timings are sub-0.1 ms, so a neighbour starting up between two back-to-back benches can still
shift one of them by tens of percent (measured in fresh-clone CI runs: 0.094 vs 0.059 ms, the
first test of the run; later "29.8% faster" in both of two pairs while other jobs loaded the
machine). The test therefore benches once to warm the device (discarded), times 1000 runs per
bench (a window of ~0.1 s instead of ~20 ms, so one preemption cannot move the median), and if
the same-artifact pair still differs it measures a fresh pair, up to three pairs: a compare that
wrongly calls one artifact "slower" than itself fails all three; a load shift that hits one bench
of a pair does not recur three times in a row. The slower-artifact checks are not retried."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.device

RUNS = "1000"
PAIRS = 3


def _bench(cli, lab, inv, build) -> str:
    before = set(lab.result_files())
    code, _, err = cli("bench", build, "--device", "local", "--inventory", inv, "--results", lab.results,
                       "--runs", RUNS, "--warmups", "auto", "--threads", "1", "-q")
    assert code == 0, err
    [new] = set(lab.result_files()) - before
    return str(new)


def _verdict(cli, a, b, *extra) -> tuple[str, dict]:
    code, out, err = cli("compare", a, b, *extra)
    assert code == 0, err
    line = " ".join(ln for ln in out.splitlines() if not ln.startswith(("A:", "B:", "warning:")))
    line = line.split(" warning:")[0]
    code, out, err = cli("compare", a, b, "--json", *extra)
    assert code == 0, err
    return line, json.loads(out)


def test_compare_same_artifact_is_not_significant_and_a_slower_one_is_detected(cli, lab, builds, slow_build):
    inv = lab.inventory()
    _bench(cli, lab, inv, builds.onnx)  # warm-up: first upload, page cache, runtime start
    attempts = []
    for _ in range(PAIRS):
        a1 = _bench(cli, lab, inv, builds.onnx)
        a2 = _bench(cli, lab, inv, builds.onnx)
        same_line, same = _verdict(cli, a1, a2, "--min-change", "5")
        attempts.append(same_line)
        if same["verdict"] == "not significant":
            break
        print(f"\nsame artifact, pair {len(attempts)} (measured again): {same_line}")
    slow = _bench(cli, lab, inv, slow_build)

    assert same_line.startswith("not significant: B vs A"), attempts
    assert same["verdict"] == "not significant" and same["n_a"] == same["n_b"] == int(RUNS)

    slow_line, slower = _verdict(cli, a1, slow)
    assert slower["verdict"] == "slower", slow_line
    assert slow_line.startswith("B is ") and "% slower than A (Mann-Whitney p=" in slow_line
    assert slower["ratio"] > 1.5 and slower["ci_low"] > 1.0 and slower["p_value"] < 0.05

    back_line, faster = _verdict(cli, slow, a1)
    print(f"\nsame artifact: {same_line}\nslower artifact: {slow_line}\nthe other way round: {back_line}")
    assert faster["verdict"] == "faster" and "% faster than A" in back_line
