"""Over SSH on the loopback device: the result JSON records load time, execution-provider
placement, the device's INT8 CPU flags, and Paddle Lite drift on one predictor per batch size."""
from __future__ import annotations

import pytest

from result_factory import read_result_doc

pytestmark = pytest.mark.device


def _bench(cli, lab, build):
    return cli("bench", build, "--device", "local", "--inventory", lab.inventory(), "--results", lab.results,
               "--runs", "5", "--warmups", "2")


def test_an_onnx_result_records_load_time_and_placement(cli, lab, builds):
    code, _, err = _bench(cli, lab, builds.onnx)
    assert code == 0, err
    r = read_result_doc(lab.result_files()[0])
    load, place = r["runtime"]["load"], r["runtime"]["placement"]
    assert load["first_ms"] > 0 and load["warm_ms"] > 0 and load["engine_cache"] is None   # no TensorRT here
    n = place["nodes"]
    assert n > 10 and place["summary"] == f"{n}/{n} nodes on CPUExecutionProvider" and "warning" not in place
    assert isinstance(r["device"]["fingerprint"]["cpu_flags"], list)


@pytest.mark.needs_lite
def test_a_lite_result_evaluates_one_batch_size_per_predictor(cli, lab, builds):
    code, _, err = _bench(cli, lab, builds.lite)
    assert code == 0, err
    r = read_result_doc(lab.result_files()[0])
    assert r["drift"]["predictors"] == {"64": 1, "28": 1} and r["drift"]["batch"] == 64
    assert r["runtime"]["load"]["warm_ms"] > 0 and "placement" not in r["runtime"]
