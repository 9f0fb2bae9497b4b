"""The content-addressed build cache: unchanged rebuilds run no pass; a quantization change
re-runs quantize and what follows it, not export."""
from __future__ import annotations

import numpy as np
import pytest

from edgeforge import api
from helpers import copy_project


def hits(result) -> dict[str, bool]:
    return {s["pass"]: s["source"] != "built" for s in result.manifest["steps"]}


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
    pytest.param("rpi4", "quantize.ptq", ["convert.lite", "verify"], marks=[pytest.mark.slow, pytest.mark.needs_lite]),
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


SMALL = '''
import paddle
from paddle import nn


def build():
    paddle.seed(0)
    return nn.Sequential(nn.Conv2D(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2D(8, 8, 3, padding=1),
                         nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 4))
'''


def test_two_cold_builds_give_the_same_key_for_every_step(tmp_path):
    """issue 29: a step's output is a function of its key. linux-x86 times INT8 against fp32 on
    the host (int8_vs_fp32, the budget's p50s): those measurements go to a side record beside
    the cache entry, so two cold builds in two empty caches agree on every key."""
    from helpers import tiny_project

    proj = tiny_project(tmp_path / "p", "small", SMALL, [-1, 3, 8, 8], samples=16)
    a = api.build(proj, "linux-x86", out=tmp_path / "a", cache_dir=tmp_path / "ca")
    b = api.build(proj, "linux-x86", out=tmp_path / "b", cache_dir=tmp_path / "cb")
    keys = [[(s["pass"], s["cache_key"], s["source"]) for s in r.manifest["steps"]] for r in (a, b)]
    assert keys[0] == keys[1] and all(source == "built" for _, _, source in keys[0])
    assert a.manifest["artifact"]["sha256"] == b.manifest["artifact"]["sha256"]
    # the measurements are still in the manifest (from the side record), and differ between builds
    assert a.manifest["int8_vs_fp32"]["fp32_samples_ms"] != b.manifest["int8_vs_fp32"]["fp32_samples_ms"]
    quantize = next(s["cache_key"] for s in a.manifest["steps"] if s["pass"] == "quantize.onnx")
    entry = tmp_path / "ca" / quantize[:2] / quantize
    assert "int8_vs_fp32" not in (entry / "entry.json").read_text()
    assert "int8_vs_fp32" in (entry / "measured.json").read_text()
    warm = api.build(proj, "linux-x86", out=tmp_path / "a", cache_dir=tmp_path / "ca")
    assert all(s["source"] == "local" for s in warm.manifest["steps"])
    assert warm.manifest["int8_vs_fp32"] == a.manifest["int8_vs_fp32"]


def test_a_device_only_runner_edit_keeps_every_step_a_hit_and_a_host_one_rebuilds(tmp_path, monkeypatch):
    """issue 48: the build code digest (in every step's key) covers the runner modules the passes
    import, not the device-only ones. The keys are computed over a copy of the package, edited
    between real builds in one temporary cache."""
    import shutil
    from pathlib import Path

    from helpers import tiny_project

    from edgeforge import cache, pipeline

    root = tmp_path / "code" / "edgeforge"
    shutil.copytree(Path(cache.__file__).resolve().parent, root,
                    ignore=shutil.ignore_patterns("__pycache__"))

    def digest_of_copy() -> str:
        cache._build_code_digests.pop(root.resolve(), None)
        return cache.build_code_digest(root)

    monkeypatch.setattr(pipeline, "build_code_digest", digest_of_copy)
    proj = tiny_project(tmp_path / "p", "small", SMALL, [-1, 3, 8, 8], samples=16)

    def build():
        r = api.build(proj, "jetson-orin", out=tmp_path / "out", cache_dir=tmp_path / "cache")
        return {s["pass"]: s["source"] for s in r.manifest["steps"]}

    cold = build()
    assert set(cold.values()) == {"built"}
    for module in ("load.py", "bench.py", "smoke.py"):
        f = root / "runner" / module
        f.write_text(f.read_text() + "\n# a device-only edit\n")
    assert build() == {p: "local" for p in cold}
    metrics = root / "runner" / "metrics.py"
    metrics.write_text(metrics.read_text() + "\n# an edit to code verify runs\n")
    assert build() == cold          # every step's key holds the code digest: all rebuilt
