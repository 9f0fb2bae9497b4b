"""issue 25, free dimensions: ``min_shape``/``opt_shape``/``max_shape`` on ``[[model.inputs]]``
(all three or none, the rank of ``shape``, equal to it where it is fixed, 1 <= min <= opt <= max
<= 65536), a -1 beyond the batch without them refused with exit 2, the data checked against
the range, the serialised spec unchanged without ranges, TensorRT's profile strings."""
from __future__ import annotations

import contextlib
import io
import textwrap
from pathlib import Path

import numpy as np
import pytest

from edgeforge.cli.main import main
from edgeforge.errors import ConfigError
from edgeforge.inference import agree
from edgeforge.manifest import InputDoc, trt_profile
from edgeforge.project import InputSpec, load_project

RANGES = {"min_shape": [1, 3, 48, 32], "opt_shape": [1, 3, 48, 320], "max_shape": [8, 3, 48, 1024]}


def _project(tmp_path: Path, extra: str, shape="[-1, 3, 48, -1]", width: int = 100) -> Path:
    (tmp_path / "edgeforge.toml").write_text(textwrap.dedent(f"""
        name = "ocr"
        [model]
        factory = "model:build"
        [[model.inputs]]
        name = "x"
        shape = {shape}
        dtype = "float32"
        """) + textwrap.dedent(extra) + textwrap.dedent("""
        [data]
        calibration = "calib.npz"
        evaluation = "eval.npz"
        """))
    for part in ("calib", "eval"):
        np.savez(tmp_path / f"{part}.npz", x=np.zeros((2, 3, 48, width), "float32"))
    return tmp_path


def _ranges(**over) -> str:
    r = {**RANGES, **over}
    return "".join(f"{k} = {v}\n" for k, v in r.items() if v is not None)


def _refusal(tmp_path: Path, extra: str, **kw) -> str:
    with pytest.raises(ConfigError) as exc:
        load_project(_project(tmp_path, extra, **kw))
    assert exc.value.exit_code == 2
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_ranges_load_and_serialise_only_when_given(tmp_path):
    p = load_project(_project(tmp_path, _ranges()))
    [spec] = p.inputs
    assert spec.ranged and spec.free_dims == [3] and spec.probe_shape() == [1, 3, 48, 320]
    assert spec.model_dump() == {"name": "x", "shape": [-1, 3, 48, -1], "dtype": "float32", **RANGES}
    plain = InputSpec(name="x", shape=[-1, 3, 48, 320])
    assert plain.model_dump() == {"name": "x", "shape": [-1, 3, 48, 320], "dtype": "float32"}   # no nulls
    assert plain.model_dump(mode="json") == plain.model_dump() and plain.probe_shape() == [1, 3, 48, 320]
    data = p.load_data("evaluation")
    assert data["x"].shape == (2, 3, 48, 100)


def test_free_dim_beyond_the_batch_needs_ranges(tmp_path):
    line = _refusal(tmp_path, "")
    assert "input 'x'" in line and "dim 3" in line and "min_shape, opt_shape and max_shape" in line


def test_free_dim_without_ranges_is_exit_2_through_the_cli(tmp_path):
    d = _project(tmp_path, "")
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(["build", str(d), "--target", "linux-x86", "--out", str(d / "out")])
    text = err.getvalue() + out.getvalue()
    assert code == 2, text
    [line] = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert "min_shape" in line and "'x'" in line


def test_all_three_or_none(tmp_path):
    line = _refusal(tmp_path, _ranges(max_shape=None))
    assert "all three" in line and "max_shape missing" in line


@pytest.mark.parametrize("over, words", [
    ({"opt_shape": [1, 3, 48, 16]}, "1 <= min <= opt <= max"),          # opt < min
    ({"max_shape": [8, 3, 48, 100]}, "1 <= min <= opt <= max"),         # max < opt
    ({"min_shape": [0, 3, 48, 32]}, "1 <= min"),                         # zero
    ({"max_shape": [8, 3, 48, 65537]}, "65536"),                         # over the limit
    ({"min_shape": [1, 3, 32]}, "rank 3"),                               # rank
    ({"opt_shape": [1, 3, 40, 320]}, "dim 2 is fixed at 48"),            # fixed dim differs
], ids=["opt-below-min", "max-below-opt", "zero", "limit", "rank", "fixed-dim"])
def test_ranges_are_checked(tmp_path, over, words):
    assert words in _refusal(tmp_path, _ranges(**over))


def test_data_outside_the_range_is_refused(tmp_path):
    p = load_project(_project(tmp_path, _ranges(), width=2000))
    with pytest.raises(ConfigError, match=r"dim 3 is 2000, outside its declared range 32\.\.1024"):
        p.load_data("calibration")


def test_batch_alone_keeps_its_meaning(tmp_path):
    [spec] = load_project(_project(tmp_path, "", shape="[-1, 3, 48, 320]", width=320)).inputs
    assert not spec.ranged and spec.free_dims == []


def test_inference_narrowing_carries_the_ranges():
    program = [{"name": "x", "shape": [-1, 3, 48, -1], "dtype": "float32"}]
    declared = [{"name": "x", "shape": [-1, 3, 48, -1], "dtype": "float32", **RANGES}]
    [got] = agree(program, declared, "edgeforge.toml")
    assert InputSpec(**got).max_shape == RANGES["max_shape"]
    with pytest.raises(ConfigError, match="only a -1 may be given a size"):
        agree(program, [{"name": "x", "shape": [-1, 3, 32, -1], "dtype": "float32"}], "edgeforge.toml")


def test_trt_profile_strings():
    two = [{"name": "x", "shape": [-1, 3, 48, -1], **RANGES},
           {"name": "ids", "shape": [-1, -1], "min_shape": [1, 1], "opt_shape": [1, 64], "max_shape": [8, 512]}]
    prof = trt_profile(two)
    assert prof["trt_profile_min_shapes"] == "x:1x3x48x32,ids:1x1"
    assert prof["trt_profile_opt_shapes"] == "x:1x3x48x320,ids:1x64"
    assert prof["trt_profile_max_shapes"] == "x:8x3x48x1024,ids:8x512"
    assert prof["complete"] is True
    part = trt_profile([two[0], {"name": "y", "shape": [-1, 10]}])
    assert part["complete"] is False and "y" in part["note"]
    assert trt_profile([{"name": "y", "shape": [-1, 10]}]) is None
    InputDoc.model_validate({"name": "x", "shape": [None, 3, 48, None], "dtype": "float32", **RANGES})


def test_a_concrete_free_dim_in_the_onnx_model_is_made_symbolic(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from edgeforge.passes.onnx_graph import symbolic_free_dims

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 48, 320])   # a converter fixed the width
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])), str(path))
    spec = {"name": "x", "shape": [-1, 3, 48, -1], **RANGES}
    assert symbolic_free_dims(path, [spec]) == [{"rewrite": "symbolic-free-dims", "nodes": 1}]
    dims = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["N", 3, 48, "x_dim3"]
    assert symbolic_free_dims(path, [spec]) == []                                   # nothing left to do
    assert symbolic_free_dims(path, [{"name": "x", "shape": [-1, 3, 48, 320]}]) == []   # no ranges: untouched
