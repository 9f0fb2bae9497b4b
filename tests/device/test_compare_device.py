"""`edgeforge compare` on real benches over the loopback device: two runs of one artifact are
"not significant"; a genuinely slower artifact (the digits model doing ~4x the convolution work,
see conftest.slow_build) is detected as slower.

The benches run one runtime thread: this box is shared (other test sessions load its 2 cores),
and a 2-thread onnxruntime pool waiting on a preempted sibling adds run-to-run shifts of 10-20%.
With one thread, back-to-back runs of one artifact measured here differ by 0-2.3% under a load
of ~4.7, but a fresh-clone CI run (the whole suite on 2 cores) saw its closest pair of four
benches differ by 5.1% (p50 0.0966 vs 0.1018 ms, p=3e-05): the same-artifact check therefore
uses a 10% practical threshold (``--min-change 10``; the default 1% flagged 2 of 6 such pairs
as "2% slower" under load, 5% failed that CI run). The slower artifact
is ~2.6x slower and is checked at the default threshold.

The same artifact does not always time the same in two benches: on this VM a new onnxruntime
session of the digits model settles in one of two steady states, ~0.058 or ~0.10 ms (measured:
5 of 20 sessions slow, 4 sessions per process; on either core, with ASLR off and with onnxruntime's
memory arena off alike), and each bench is a new session. Two benches that landed in different
states differ for real, and compare rightly says so (fresh-clone CI runs saw "15.9% slower" and
"91.5% slower" pairs). So the test benches the artifact four times (after a discarded warm-up
bench) and compares every pair: the pair with the closest medians, which with two states
always exists within one state, must be "not significant"; a compare that calls an artifact
slower than itself fails there. Each bench times 1000 runs (~0.1 s), so one preemption cannot
move a median. The slower-artifact checks are not retried."""
from __future__ import annotations

import json
import math

import pytest

pytestmark = pytest.mark.device

RUNS = "1000"
SAME = 4          # benches of the same artifact


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
    runs = [_bench(cli, lab, inv, builds.onnx) for _ in range(SAME)]
    pairs, p50 = [], {}
    for k, a in enumerate(runs):
        for b in runs[k + 1:]:
            line, res = _verdict(cli, a, b, "--min-change", "10")
            pairs.append((abs(math.log(res["ratio"])), line, res))
            p50.update({a: res["p50_a_ms"], b: res["p50_b_ms"]})
    pairs.sort(key=lambda t: t[0])
    _, same_line, same = pairs[0]
    a1 = min(runs, key=p50.get)       # the slower artifact is compared with the fastest bench
    print("\nsame artifact, every pair:\n  " + "\n  ".join(t[1] for t in pairs))
    slow = _bench(cli, lab, inv, slow_build)

    assert same_line.startswith("not significant: B vs A"), [t[1] for t in pairs]
    assert same["verdict"] == "not significant" and same["n_a"] == same["n_b"] == int(RUNS)

    slow_line, slower = _verdict(cli, a1, slow)
    assert slower["verdict"] == "slower", slow_line
    assert slow_line.startswith("B is ") and "% slower than A (Mann-Whitney p=" in slow_line
    assert slower["ratio"] > 1.5 and slower["ci_low"] > 1.0 and slower["p_value"] < 0.05

    back_line, faster = _verdict(cli, slow, a1)
    print(f"\nsame artifact: {same_line}\nslower artifact: {slow_line}\nthe other way round: {back_line}")
    assert faster["verdict"] == "faster" and "% faster than A" in back_line
