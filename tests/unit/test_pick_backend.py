"""Which backend a build takes for its input (issue 45): a PIR program on a target whose default
is Paddle Lite goes to the target's ONNX backend when it has one, and says why; otherwise the
choice is the user's or the target's, and a PIR program for Lite is refused naming what works."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from edgeforge.errors import ConfigError
from edgeforge.options import resolve_backend
from edgeforge.passes.export import lite_refusal, routes_for
from edgeforge.targets import load_target


def _project(tmp_path: Path, suffix: str | None) -> SimpleNamespace:
    """A project whose model is a factory (``suffix`` None) or an exported prefix.<suffix>."""
    if suffix is None:
        return SimpleNamespace(root=tmp_path, inference=None, spec=SimpleNamespace(model=SimpleNamespace(inference=None)))
    prefix = tmp_path / "export" / "inference"
    prefix.parent.mkdir()
    prefix.with_suffix(suffix).write_bytes(b"program")
    prefix.with_suffix(".pdiparams").write_bytes(b"params")
    return SimpleNamespace(root=tmp_path, inference=prefix, spec=SimpleNamespace(model=SimpleNamespace(
        inference="export/inference")))


@pytest.mark.parametrize("target", ["rpi4", "rpi5", "android-arm64"])
def test_a_pir_program_takes_the_onnx_backend_of_a_lite_target(tmp_path, target):
    backend, why = resolve_backend(load_target(target), None, _project(tmp_path, ".json"))
    assert backend == "onnx" and why == "backend: onnx, not lite: inference.json is PIR, Paddle Lite reads only .pdmodel"
    assert len(why) <= 80


@pytest.mark.parametrize("suffix,target,asked,want", [
    (".json", "android-armv7", None, "lite"),      # no ONNX backend there: refused later
    (".json", "rpi4", "lite", "lite"),             # asked for: kept, refused later
    (".json", "jetson-orin", None, "onnx"),        # ONNX already the default: nothing to say
    (".pdmodel", "rpi4", None, "lite"),            # a legacy program: Lite reads it
    (None, "rpi4", None, "lite"),                  # a factory: edgeforge exports what Lite reads
])
def test_otherwise_the_choice_is_the_users_or_the_targets(tmp_path, suffix, target, asked, want):
    assert resolve_backend(load_target(target), asked, _project(tmp_path, suffix)) == (want, None)


def test_a_pir_program_for_lite_is_refused_naming_the_commands(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    project = _project(tmp_path, ".json")
    with pytest.raises(ConfigError) as err:
        routes_for(project, "lite", load_target("rpi4"))
    line = err.value.one_line()
    assert "inference.json is a PIR program" in line and "\n" not in line
    assert "edgeforge build --target rpi4 --backend onnx" in line
    assert "edgeforge export --factory MODULE:CLASS --weights W.pdparams --legacy --out legacy" in line
    armv7 = lite_refusal(project, load_target("android-armv7")).one_line()
    assert "--backend onnx" not in armv7 and "edgeforge export --factory" in armv7
    assert routes_for(project, "onnx", load_target("rpi4")) == ("pir",)
