"""The content-addressed build cache: unchanged rebuilds run no pass; a quantization change
re-runs quantize and what follows it, not export."""
from __future__ import annotations

import numpy as np
import pytest

from edgeforge import api
from helpers import copy_project


def hits(result) -> dict[str, bool]:
    return {s["pass"]: s["cache_hit"] for s in result.manifest["steps"]}


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"


def test_unchanged_rebuild_runs_no_pass(digits_project, cache_dir, tmp_path):
    first = api.build(digits_project, "jetson-orin", out=tmp_path / "a", cache_dir=cache_dir)
    assert not any(hits(first).values())
    second = api.build(digits_project, "jetson-orin", out=tmp_path / "a", cache_dir=cache_dir)
    assert all(hits(second).values())
    assert second.manifest["artifact"]["sha256"] == first.manifest["artifact"]["sha256"]
    assert second.manifest["verify"] == first.manifest["verify"]


@pytest.mark.parametrize("target, quantize, after", [
    ("jetson-orin", "quantize.onnx", ["verify"]),
    ("rpi4", "quantize.ptq", ["convert.lite", "verify"]),
])
def test_quantization_change_reruns_quantize_and_after_only(digits_project, cache_dir, tmp_path, target, quantize, after):
    api.build(digits_project, target, out=tmp_path / "a", cache_dir=cache_dir)
    changed = api.build(digits_project, target, out=tmp_path / "b", cache_dir=cache_dir, algo="hist")
    h = hits(changed)
    assert h["export"] and h["legalize"]
    assert not h[quantize]
    assert not any(h[p] for p in after)
    assert changed.manifest["quantization"]["algo"] == "hist"


def test_new_weights_rerun_export(digits_project, cache_dir, tmp_path):
    proj = copy_project(digits_project, tmp_path / "p")
    api.build(proj, "jetson-orin", out=tmp_path / "a", cache_dir=cache_dir)
    import pickle

    with open(proj / "digits.pdparams", "rb") as fh:
        state = pickle.load(fh)
    state["classifier.2.bias"] = state["classifier.2.bias"] + np.float32(0.01)
    with open(proj / "digits.pdparams", "wb") as fh:
        pickle.dump(state, fh, protocol=4)
    again = api.build(proj, "jetson-orin", out=tmp_path / "a", cache_dir=cache_dir)
    assert not any(hits(again).values())


def test_new_calibration_data_reruns_quantize_not_export(digits_project, cache_dir, tmp_path):
    proj = copy_project(digits_project, tmp_path / "p")
    api.build(proj, "jetson-orin", out=tmp_path / "a", cache_dir=cache_dir)
    with np.load(proj / "data/calib.npz") as z:
        x = z["x"]
    np.savez(proj / "data/calib.npz", x=x[::-1].copy())
    h = hits(api.build(proj, "jetson-orin", out=tmp_path / "a", cache_dir=cache_dir))
    assert h["export"] and h["convert.onnx"] and not h["quantize.onnx"]


def test_corrupted_cache_entry_is_rebuilt(digits_project, cache_dir, tmp_path):
    first = api.build(digits_project, "jetson-orin", out=tmp_path / "a", cache_dir=cache_dir)
    key = next(s["cache_key"] for s in first.manifest["steps"] if s["pass"] == "convert.onnx")
    entry = cache_dir / key[:2] / key / "artifact" / "model.onnx"
    entry.write_bytes(entry.read_bytes()[:100])
    again = api.build(digits_project, "jetson-orin", out=tmp_path / "a", cache_dir=cache_dir)
    assert not hits(again)["convert.onnx"]
    assert again.manifest["artifact"]["sha256"] == first.manifest["artifact"]["sha256"]


def test_no_cache_runs_every_pass(digits_project, cache_dir, tmp_path):
    api.build(digits_project, "jetson-orin", out=tmp_path / "a", cache_dir=cache_dir)
    again = api.build(digits_project, "jetson-orin", out=tmp_path / "a", cache_dir=cache_dir, no_cache=True)
    assert not any(hits(again).values())
