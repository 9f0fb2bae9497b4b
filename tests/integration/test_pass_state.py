"""Passes keep no state between runs, and take the float model through the chain (issue 48).

The same pass instances run twice (two cold caches, two work directories) must give the same
steps and the same result, and leave nothing on the pass objects; a run of verify or
quantize.qat reads the float model only through what the chain gave it (``needs``)."""
from __future__ import annotations

import copy

from edgeforge.api import project_artifact
from edgeforge.build_meta import split_measured
from edgeforge.cache import Cache
from edgeforge.options import BuildOptions
from edgeforge.passes.base import PADDLE_FLOAT, PassContext
from edgeforge.plan import plan_passes
from edgeforge.pipeline import Pipeline
from edgeforge.project import load_project
from edgeforge.targets import load_target


def test_a_pass_instance_run_twice_gives_the_same_result(digits_project, tmp_path):
    project, target = load_project(digits_project), load_target("linux-x86")
    build = BuildOptions.of(precision="int8").resolve(target, project)
    passes = plan_passes(project, build)
    assert [p.name for p in passes] == ["export", "legalize", "convert.onnx", "quantize.onnx", "verify"]
    before = [copy.deepcopy(vars(p)) for p in passes]
    runs = []
    for i in (1, 2):
        work = tmp_path / f"work{i}"
        work.mkdir()
        ctx = PassContext(project=project, target=target, backend=build.backend, precision=build.precision,
                          workdir=work)
        pipeline = Pipeline(passes, Cache(tmp_path / f"cache{i}"))
        final, steps = pipeline.run(project_artifact(project), ctx)
        assert all(s.source.value == "built" for s in steps)       # both runs ran every pass
        runs.append((split_measured(final.meta)[0], [(s.name, s.key) for s in steps],
                     ctx.history[PADDLE_FLOAT].digest))
    assert [vars(p) for p in passes] == before, "a pass kept state from its run"
    (meta1, keys1, float1), (meta2, keys2, float2) = runs
    assert keys1 == keys2 and float1 == float2
    assert meta1["artifact_sha256"] == meta2["artifact_sha256"]
    assert meta1["verify"] == meta2["verify"] and meta1["verify"]["status"] == "passed"
    assert meta1["quantization"] == meta2["quantization"]
