"""A rank-1 weight in a quantizable op (PicoDet's DFL projection, ``F.linear(p, project)``
with ``project [8]``; TOOLCHAIN item 29): Paddle's PTQ indexes ``shape[1]`` of it with every
calibration. The build for Paddle Lite keeps that layer in float, says so, and quantizes the
rest, whatever ``--calibration`` says (issue 45)."""
from __future__ import annotations

import pytest
from helpers import run_cli
from task_projects import dfl_project

from edgeforge import api
from edgeforge.cache import Cache

pytestmark = pytest.mark.needs_lite     # every test here builds for or runs Paddle Lite

# KL (the default) and abs_max (the two) in the default suite; the others under `slow`
ALGOS = ["KL", "abs_max", *(pytest.param(a, marks=pytest.mark.slow) for a in ("hist", "mse", "avg"))]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return dfl_project(tmp_path_factory.mktemp("dfl") / "proj")


def _quant_ops(manifest, cache_dir) -> dict[str, list[str]]:
    """op type -> the input names of its quantize ops, in the INT8 program that went to Lite."""
    from edgeforge.passes.legalize import MODEL_FILE, parse_program

    key = next(s["cache_key"] for s in manifest["steps"] if s["pass"] == "legalize.int8")
    prog = parse_program(Cache(cache_dir).entry(key) / "artifact" / MODEL_FILE)
    ops = prog.global_block().ops
    return {op.type: op.input_arg_names for op in ops}


@pytest.mark.parametrize("algo", ALGOS)
def test_every_calibration_keeps_the_rank1_weight_in_float(project, tmp_path, algo):
    import os

    # plain INT8 at that calibration (no budget fallback): the conv and the fc must be INT8
    m = api.build(project, "rpi4", out=tmp_path / "out", algo=algo, float_fallback=False).manifest
    odd = m["quantization"]["float_weights"]
    assert [(w["op"], w["shape"]) for w in odd] == [("matmul_v2", [8])], odd
    assert m["artifact"]["path"] == "model.nb" and m["precision"] == "int8"
    ops = _quant_ops(m, os.environ["EDGEFORGE_CACHE"])
    # the conv and the fc are INT8 (their weights dequantized), the projection's matmul reads the float weight
    assert any(t.startswith("fake_") or "dequantize" in t for t in ops), sorted(ops)
    assert odd[0]["layer"] in ops["matmul_v2"] and m["keep_float"] == []


def test_the_cli_says_which_layer_stays_float(project, tmp_path):
    res = run_cli("build", str(project), "--target", "rpi4", "--calibration", "abs_max", "--out", str(tmp_path / "o"))
    assert res.returncode == 0, res.stderr[-2000:]
    out = " ".join(res.stdout.split())
    assert "kept in float: 1 layer(s) whose weight INT8 kernels cannot take" in out and "[8] (matmul_v2)" in out
    assert "Traceback" not in res.stderr
