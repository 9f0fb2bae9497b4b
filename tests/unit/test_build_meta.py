"""The passes' meta is typed (edgeforge/build_meta.py): the models, not path strings, say which
fields are host measurements, and a step's cache key follows the content, not the host's
timings."""
from __future__ import annotations

import time
from pathlib import Path

from edgeforge.build_meta import (AccuracyBudget, Attempt, BuildMeta, Cost, Quantization, Scheme, SpeedRow,
                                  Verify, is_measured, merge_measured, split_measured)
from edgeforge.cache import Cache
from edgeforge.passes.base import ONNX, PROJECT, VERIFIED, Artifact, Pass, PassConfig, PassContext
from edgeforge.pipeline import Pipeline


class _Content(PassConfig):
    keep_float: tuple[str, ...] = ()
    payload: str = "int8 weights"


class _Quantize(Pass):
    """A pass that writes a file and times something on this host, as quantize does."""
    name, version, consumes, produces, Config = "test.quantize", 1, frozenset({PROJECT}), ONNX, _Content

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> BuildMeta:
        (out_dir / "model.onnx").write_text(self.config.payload)
        t0 = time.perf_counter()
        sum(range(20_000))
        took = (time.perf_counter() - t0) * 1e3 + 1e-6      # a real host timing: differs run to run
        return BuildMeta(
            file="model.onnx", precision="int8", keep_float=list(self.config.keep_float),
            int8_vs_fp32={"fp32_p50_ms": took * 2, "int8_p50_ms": took},
            quantization=Quantization(algo="KL", scheme=Scheme(activations="uint8", host_cpu_flags=[f"t{took}"])),
            accuracy_budget=AccuracyBudget(met=True, seconds=took, attempts=[Attempt(algo="KL", at_s=took)],
                                           speed=[SpeedRow(variant="int8", chosen=True, p50_ms=took)],
                                           cost=Cost(p50_ms=took, p50_ms_int8=took, size_bytes=10)),
            verify=Verify(status="passed", host_cpu_flags=[f"t{took}"]))


class _Verify(Pass):
    name, version, consumes, produces = "test.verify", 1, frozenset({ONNX}), VERIFIED

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> BuildMeta:
        (out_dir / inp.meta.file).write_bytes((inp.path / inp.meta.file).read_bytes())
        return inp.meta.updated(num_eval_samples=1)


def _build(tmp: Path, cache: str, **content) -> tuple[Artifact, list]:
    ctx = PassContext(project=None, target=None, backend="onnx", precision="int8", workdir=tmp / f"w-{cache}")
    ctx.workdir.mkdir(parents=True, exist_ok=True)
    source = Artifact(PROJECT, tmp, digest="0" * 64)
    passes = [_Quantize(_Content(**content)), _Verify()]
    return Pipeline(passes, Cache(tmp / cache)).run(source, ctx)


def test_the_cache_key_ignores_host_timings_and_follows_content(tmp_path):
    a, steps_a = _build(tmp_path, "ca")
    b, steps_b = _build(tmp_path, "cb")
    # the timings differ between the two builds, yet the next step's key does not
    assert a.meta.int8_vs_fp32 != b.meta.int8_vs_fp32
    assert a.meta.accuracy_budget.speed[0].p50_ms != b.meta.accuracy_budget.speed[0].p50_ms
    assert [s.key for s in steps_a] == [s.key for s in steps_b]
    assert not any(s.source.hit for s in steps_a + steps_b)
    # a real content difference in the meta changes the key of the step that takes it
    c, steps_c = _build(tmp_path, "cc", keep_float=["conv_3"])
    assert steps_c[1].key != steps_a[1].key
    # ... and so does a difference in the bytes (the same meta otherwise)
    d, steps_d = _build(tmp_path, "cd", payload="other weights")
    assert steps_d[1].key != steps_a[1].key
    # a warm rebuild hands the measurements back from the side record, typed
    warm, steps_w = _build(tmp_path, "ca")
    assert all(s.source.hit for s in steps_w)
    assert warm.meta.int8_vs_fp32 == a.meta.int8_vs_fp32
    assert warm.meta.accuracy_budget.attempts[0].at_s == a.meta.accuracy_budget.attempts[0].at_s
    assert warm.meta.quantization.scheme.host_cpu_flags == a.meta.quantization.scheme.host_cpu_flags


def test_the_models_name_the_measured_fields():
    meta = BuildMeta(file="model.onnx", int8_vs_fp32={"fp32_p50_ms": 1.5},
                     accuracy_budget=AccuracyBudget(met=True, seconds=2.1,
                                                    speed=[SpeedRow(variant="int8", p50_ms=0.3, chosen=True)]),
                     verify=Verify(status="passed"))
    content, measured = split_measured(meta)
    assert content == {"file": "model.onnx", "verify": {"status": "passed"},
                       "accuracy_budget": {"met": True, "speed": [{"variant": "int8", "chosen": True}]}}
    assert sorted(p for p, _ in measured) == [["accuracy_budget", "seconds"], ["accuracy_budget", "speed", 0, "p50_ms"],
                                              ["int8_vs_fp32"]]
    assert BuildMeta.model_validate(merge_measured(content, measured)) == meta
    # a side record naming any other field (a forged one, from a remote cache too) changes nothing
    forged = measured + [[["verify", "status"], "failed"], [["file"], "other.onnx"], "junk", [[], 1],
                         [["accuracy_budget", "speed", True, "p50_ms"], 9], [["accuracy_budget", "met"], False]]
    assert merge_measured(content, forged) == merge_measured(content, measured)
    assert is_measured(["qat", "host"]) and is_measured(["prune", "host"]) and is_measured(["qat", "seconds"])
    assert is_measured(["accuracy_budget", "cost", "p50_ms_int8"]) and is_measured(["verify", "host_cpu_flags"])
    assert not is_measured(["accuracy_budget", "cost", "size_bytes"]) and not is_measured(["qat"])


def test_the_manifest_fields_are_json_as_written():
    meta = BuildMeta.model_validate({"file": "m.nb", "accuracy_budget": {"met": True, "extra": [1]},
                                     "quantization": {"algo": "KL", "fast_kl": {"enabled": True}}})
    fields = meta.manifest_fields()
    assert "file" not in fields                  # internal: the manifest records it elsewhere
    assert fields["accuracy_budget"] == {"met": True, "extra": [1]}
    assert fields["quantization"] == {"algo": "KL", "fast_kl": {"enabled": True}}
    assert fields["verify"] == {} and fields["keep_float"] == [] and fields["qat"] is None
