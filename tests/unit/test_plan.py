"""The build plan as data (plan.py), the chain check over what a pass needs, and the
one field for a step's cache source."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from edgeforge.errors import ConfigError, PassError
from edgeforge.manifest import CacheSource, StepDoc, manifest_steps
from edgeforge.options import BuildOptions
from edgeforge.passes.base import ONNX, PADDLE_FLOAT, PROJECT, REGISTRY, Artifact, PassContext
from edgeforge.passes.onnx import OnnxConvertPass
from edgeforge.passes.export import ExportPass
from edgeforge.plan import PLAN, REFUSALS, check_combinations, plan_passes, steps_for
from edgeforge.passes.verify import VerifyPass
from edgeforge.pipeline import Pipeline, StepRecord, check_chain
from edgeforge.cache import Cache
from edgeforge.project import load_project
from edgeforge.targets import load_target

REPO = Path(__file__).resolve().parents[2]


def test_every_plan_row_names_registered_passes_and_chains():
    for backend, precision in PLAN:
        names = steps_for(backend, precision, {"prune", "legalize", "qat"})
        assert names[0] == "export" and names[-1] == "verify", names
        assert all(n in REGISTRY for n in names), names
    assert steps_for("lite", "int8", {"legalize", "qat"}) == [
        "export", "legalize", "quantize.ptq", "quantize.qat", "legalize.int8", "convert.lite", "verify"]
    assert steps_for("onnx", "fp16", set()) == ["export", "convert.onnx", "fp16.onnx", "verify"]


def test_plan_passes_reads_the_table_and_the_chain_holds():
    project = load_project(REPO / "examples" / "digits")
    for target, opts in (("linux-x86", {}), ("linux-x86", {"precision": "fp32", "backend": "lite"}),
                         ("rpi4", {}), ("jetson-orin", {"precision": "fp16"})):
        build = BuildOptions.of(**opts).resolve(load_target(target))
        passes = plan_passes(project, build)
        flags = {"legalize"} | ({"qat"} if any(p.name == "quantize.qat" for p in passes) else set())
        assert [p.name for p in passes] == steps_for(build.backend, build.precision, flags)
        assert all(type(p) is REGISTRY[p.name] for p in passes)
        check_chain(passes, PROJECT)
    rpi = plan_passes(project, BuildOptions().resolve(load_target("rpi4")))
    assert next(p for p in rpi if p.name == "convert.lite").config.valid_targets == ["arm"]


def test_refusals_are_data_with_their_messages():
    project = load_project(REPO / "examples" / "digits")
    build = BuildOptions.of(prune=0.3, qat=True).resolve(load_target("linux-x86"))
    with pytest.raises(ConfigError, match="--prune and --qat together are not supported") as exc:
        plan_passes(project, build)
    assert exc.value.exit_code == 2
    assert {r.both for r in REFUSALS} == {("fold", "qat"), ("fold", "prune"), ("prune", "qat")}
    # [preprocess] fold = true with --qat or --prune; with both, the fold/qat line comes first
    folded, plain = SimpleNamespace(fold={"input": "image"}), SimpleNamespace(fold=None)
    cases = [(folded, True, None, "--qat trains the factory's layer, and [preprocess] fold = true"),
             (folded, None, 0.3, "--prune rebuilds the factory's layer, and [preprocess] fold = true"),
             (folded, True, 0.3, "--qat trains the factory's layer"),
             (plain, True, 0.3, "--prune and --qat together")]
    for project, qat, flops, message in cases:
        with pytest.raises(ConfigError, match=re.escape(message)):
            check_combinations(project, SimpleNamespace(qat=qat), flops)
    check_combinations(folded, SimpleNamespace(qat=False), None)     # --no-qat with fold: fine
    check_combinations(plain, SimpleNamespace(qat=True), None)


def test_the_chain_check_refuses_a_chain_without_the_float_model(tmp_path):
    assert PADDLE_FLOAT in VerifyPass.needs
    check_chain([ExportPass(), OnnxConvertPass(), VerifyPass()], PROJECT)      # export made it
    with pytest.raises(PassError, match=re.escape("pass verify: needs a 'paddle.float' artifact")) as exc:
        check_chain([VerifyPass()], ONNX)
    assert exc.value.exit_code == 3
    # the pipeline checks before anything runs: nothing is built, nothing is cached
    ctx = PassContext(project=load_project(REPO / "examples" / "digits"), target=load_target("linux-x86"),
                      backend="onnx", precision="fp32", workdir=tmp_path)
    with pytest.raises(PassError, match="needs a 'paddle.float'"):
        Pipeline([VerifyPass()], Cache(tmp_path / "cache")).run(Artifact(ONNX, tmp_path, {}, "d"), ctx)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(PassError, match="did not declare"):
        ctx.needed(PADDLE_FLOAT, "verify")


def test_no_pass_reads_the_history():
    """A pass takes what it reads through the chain (``needs``), never from ctx.history."""
    passes = REPO / "edgeforge" / "passes"
    readers = [str(p.relative_to(REPO)) for p in passes.rglob("*.py") if ".history" in p.read_text()]
    assert readers == []


def test_a_step_says_its_cache_source_once():
    doc = StepRecord("export", 3, 1.23456, "k" * 64, CacheSource.REMOTE).to_json()
    assert doc == {"pass": "export", "version": 3, "source": "remote", "seconds": 1.235, "cache_key": "k" * 64}
    step = StepDoc.model_validate(doc)
    assert step.source is CacheSource.REMOTE and step.hit and step.source.label == "remote hit"
    # the forms earlier builds wrote are read into the same field
    earlier = [({"cache_hit": True, "cache": "remote hit", "source": "remote"}, CacheSource.REMOTE),
               ({"cache_hit": True, "cache": "hit"}, CacheSource.LOCAL),
               ({"cache_hit": False}, CacheSource.BUILT), ({"cache_hit": True}, CacheSource.LOCAL)]
    for fields, source in earlier:
        got = manifest_steps({"steps": [{"pass": "verify", "seconds": 1.0, **fields}]})
        assert [s.source for s in got] == [source] and not hasattr(got[0], "cache_hit")
    with pytest.raises(ValueError):
        StepDoc.model_validate({"pass": "verify", "seconds": 1.0, "source": "somewhere"})


def test_precision_auto_is_a_value_of_its_own():
    """None is the target's precision; "auto" a choice among builds, never one build."""
    assert BuildOptions().precision is None and BuildOptions.of(precision="auto").precision == "auto"
    x86 = load_target("linux-x86")
    assert BuildOptions().resolve(x86).precision == x86.precision_for("onnx")
    with pytest.raises(ConfigError, match="precision auto builds each precision") as exc:
        BuildOptions.of(precision="auto").resolve(x86)
    assert exc.value.exit_code == 2


def test_what_a_runtime_cannot_run_is_the_targets_data(tmp_path):
    x86 = load_target("linux-x86")
    assert set(x86.backend.lite.refuse) == {"int8", "fp16"}
    with pytest.raises(ConfigError, match="Paddle Lite fp16 needs an arm valid target") as exc:
        BuildOptions.of(backend="lite", precision="fp16").resolve(x86)
    assert exc.value.exit_code == 2 and exc.value.hint == "use --precision fp32"
    # any backend of any profile can say it: a refusal written into a copy of rpi4
    text = (REPO / "targets" / "rpi4.toml").read_text()
    (tmp_path / "rpi4.toml").write_text(text.replace(
        "[backend.onnx.scheme]", '[backend.onnx.refuse.fp16]\nreason = "no fp16 kernels on this board"\n\n'
                                 "[backend.onnx.scheme]"))
    rpi = load_target("rpi4", tmp_path)
    with pytest.raises(ConfigError, match="no fp16 kernels on this board"):
        BuildOptions.of(backend="onnx", precision="fp16").resolve(rpi)
    assert BuildOptions.of(backend="onnx", precision="fp32").resolve(rpi).precision == "fp32"
    # a Lite x86 profile that does not refuse what Lite x86 gets wrong does not load
    bare = (REPO / "targets" / "linux-x86.toml").read_text().split("[backend.lite.refuse.int8]")
    (tmp_path / "linux-x86.toml").write_text(bare[0] + "[quantization]" + bare[1].split("[quantization]", 1)[1])
    with pytest.raises(ConfigError, match="must refuse int8 and fp16"):
        load_target("linux-x86", tmp_path)
