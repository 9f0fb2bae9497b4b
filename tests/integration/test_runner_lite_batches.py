"""The runner never reuses a Paddle Lite predictor across batch sizes (Paddle Lite's ARM INT8 fc
kernel prepares its weights on the first run only: a predictor run at batch 1, then 64, gives
wrong outputs). Driven with the real Paddle Lite x86 runtime on a float digits .nb."""
from __future__ import annotations

import json
import subprocess

import pytest

from edgeforge import api
from edgeforge.device.link.runner_app import runner_app
from edgeforge.runner.protocol import EVENT_PREFIX, EXIT_OK
from edgeforge.toolchain import find_lite

pytestmark = pytest.mark.needs_lite     # every test here builds for or runs Paddle Lite


@pytest.fixture(scope="module")
def lite_build(digits_project, tmp_path_factory):
    return api.build(digits_project, "linux-x86", backend="lite", out=tmp_path_factory.mktemp("lite") / "x86-lite")


def _spec(m):
    return {"files": {}, "artifact": m["artifact"], "backend": m["backend"], "inputs": m["inputs"],
            "reference": m["reference"], "runtime": dict(m["runtime"]), "warmups": 2, "runs": 5,
            "runner": "python"}


# Paddle Lite runs in its own interpreter (the Lite toolchain): the runner zipapp is driven there.
_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])              # the runner zipapp, whose package a device imports
import edgeforge_runner.predictors as predictors
from edgeforge_runner.bench import bench
made = []                                    # one list of batch sizes per predictor created
real = predictors.lite_predictor

def counting(*args, **kwargs):
    run = real(*args, **kwargs)
    sizes = []
    made.append(sizes)

    def wrapped(feeds):
        sizes.append(len(next(iter(feeds.values()))))
        return run(feeds)
    wrapped.runtime, wrapped.input_names = run.runtime, run.input_names
    return wrapped

predictors.lite_predictor = counting
code = bench(sys.argv[2], json.loads(sys.argv[3]))
print("@@made " + json.dumps({"code": code, "made": made}))
"""


def test_bench_evaluates_drift_with_one_lite_predictor_per_batch_size(lite_build):
    m = lite_build.manifest
    res = subprocess.run([find_lite().python, "-c", _CHILD, str(runner_app().path), str(lite_build.out_dir),
                          json.dumps(_spec(m))], capture_output=True, text=True, timeout=600)
    lines = res.stdout.splitlines()
    child = next((json.loads(ln[len("@@made "):]) for ln in lines if ln.startswith("@@made ")), None)
    assert child is not None and child["code"] == EXIT_OK, res.stdout[-2000:] + res.stderr[-2000:]
    made = child["made"]
    events = [json.loads(line[len(EVENT_PREFIX):]) for line in lines if line.startswith(EVENT_PREFIX)]
    drift = next(e for e in events if e["event"] == "drift")
    rt = next(e for e in events if e["event"] == "runtime")
    # 540 samples: 8 chunks of 64 and one of 28, each size on a predictor of its own
    assert drift["predictors"] == {"64": 1, "28": 1} and drift["batch"] == 64
    assert all(len(set(sizes)) == 1 for sizes in made if sizes), made
    # first load, warm load (kept for the timed runs), then one predictor per drift batch size
    assert [sizes[0] for sizes in made] == [1, 1, 64, 28]
    assert rt["load"]["first_ms"] > 0 and rt["load"]["warm_ms"] > 0 and "placement" not in rt
    # the float .nb gives the host's verify figures
    assert drift["accuracy"] == pytest.approx(m["verify"]["accuracy"])
    assert drift["cosine"] > 0.9999
