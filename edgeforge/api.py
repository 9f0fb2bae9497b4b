"""Library entry points. The CLI is a thin layer over these; nothing here prints or exits."""
from __future__ import annotations

import datetime as _dt
import json
import platform
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import __version__
from .cache import Cache, sha256_file, sha256_json, sha256_file as _sha
from .errors import ConfigError, EdgeforgeError
from .fsutil import atomic_dir, write_json_atomic
from .pipeline import Event, Pipeline
from .project import Project, load_project
from .targets import TargetProfile, load_target

BUILD_SCHEMA = "edgeforge.build/1"
Log = Callable[[str], None]


@dataclass
class BuildResult:
    out_dir: Path
    manifest: dict

    @property
    def verify_status(self) -> str:
        return self.manifest["verify"]["status"]


def project_artifact(project: Project):
    from .passes.base import PROJECT, Artifact

    parts = {"model": project.spec.model.model_dump(mode="json")}
    files = [p for p in project.source_files() if p.name != "edgeforge.toml"]
    for p in files:
        if not p.is_file():
            if p == project.weights:
                raise ConfigError(f"weights file not found: {p}", hint="train the model first or fix [model].weights")
            continue
        parts[p.relative_to(project.root).as_posix()] = _sha(p)
    return Artifact(PROJECT, project.root, {}, sha256_json(parts))


def plan_passes(project: Project, target: TargetProfile, backend: str, precision: str,
                algo: str | None = None, keep_float: list[str] | None = None,
                max_accuracy_drop: float | None = None, calibration_search: bool = False,
                float_fallback: bool = True, legalize: bool = True, min_cosine: float | None = None):
    from .passes.export import ExportPass
    from .passes.legalize import LegalizeInt8Pass, LegalizePass
    from .passes.lite import LiteConvertPass
    from .passes.onnx import OnnxConvertPass, OnnxFp16Pass
    from .passes.quantize import OnnxQuantizePass, PaddlePTQPass, QuantConfig
    from .passes.verify import VerifyPass

    bcfg = target.backend_config(backend)
    q = target.quantization
    qcfg = QuantConfig(algo=algo or q.algo, algo_fixed=algo is not None, calibration_batches=q.calibration_batches, batch_size=q.batch_size,
                       per_channel_weights=q.per_channel_weights,
                       keep_float=list(keep_float if keep_float is not None else q.keep_float),
                       max_accuracy_drop=q.max_accuracy_drop if max_accuracy_drop is None else max_accuracy_drop,
                       min_cosine=q.min_cosine if min_cosine is None else min_cosine,
                       calibration_search=calibration_search, float_fallback=float_fallback,
                       data_digest=_digest_or_empty(project.path(project.spec.data.calibration)),
                       eval_digest=_digest_or_empty(project.path(project.spec.data.evaluation)))
    vt = list(getattr(bcfg, "valid_targets", []))
    passes = [ExportPass()]
    if legalize:
        passes.append(LegalizePass(LegalizePass.Config(backend=backend, valid_targets=vt)))
    if backend == "lite":
        if precision == "int8":
            passes.append(PaddlePTQPass(qcfg))
            if legalize:
                passes.append(LegalizeInt8Pass(LegalizeInt8Pass.Config(backend=backend, valid_targets=vt)))
        passes.append(LiteConvertPass(LiteConvertPass.Config(valid_targets=vt, fp16=precision == "fp16")))
    else:
        passes.append(OnnxConvertPass(OnnxConvertPass.Config(opset=bcfg.opset)))
        if precision == "int8":
            passes.append(OnnxQuantizePass(qcfg))
        elif precision == "fp16":
            passes.append(OnnxFp16Pass())
    eval_path = project.path(project.spec.data.evaluation)
    passes.append(VerifyPass(VerifyPass.Config(
        host_runnable=bcfg.host_runnable,
        max_accuracy_drop=q.max_accuracy_drop if max_accuracy_drop is None else max_accuracy_drop,
        min_cosine=q.min_cosine if min_cosine is None else min_cosine,
        data_digest=sha256_file(eval_path) if eval_path.is_file() else "")))
    return passes


def _digest_or_empty(path: Path) -> str:
    return sha256_file(path) if path.is_file() else ""


def resolve_precision(target: TargetProfile, backend: str, precision: str | None) -> str:
    chosen = precision or target.precision_for(backend)
    bcfg = target.backend_config(backend)
    if backend == "lite":
        if chosen == "int8" and "x86" in bcfg.valid_targets:
            raise ConfigError(
                "Paddle Lite x86 INT8 kernels give wrong outputs (chance-level accuracy)",
                hint="use --precision fp32 for the lite backend on x86, or --backend onnx for INT8",
            )
        if chosen == "fp16" and "arm" not in bcfg.valid_targets:
            raise ConfigError("Paddle Lite fp16 needs an arm valid target", hint="use --precision fp32")
    return chosen


def default_out_dir(project: Project, target: TargetProfile, backend: str, precision: str) -> Path:
    suffix = "" if backend == target.backend.default else f"-{backend}"
    if precision != target.precision_for(backend):
        suffix += f"-{precision}"
    return Path("build") / f"{project.name}-{target.name}{suffix}"


def toolchain_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("paddlepaddle", "paddlelite", "paddle2onnx", "onnxruntime", "paddleslim", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    from .toolchain import lite_versions   # Paddle Lite runs in its own interpreter

    out.update(lite_versions())
    return out


def build(project_dir: str | Path, target: str, *, out: str | Path | None = None, precision: str | None = None,
          backend: str | None = None, no_cache: bool = False, cache_dir: str | Path | None = None,
          algo: str | None = None, max_accuracy_drop: float | None = None, calibration_search: bool = False,
          float_fallback: bool = True, legalize: bool = True, min_cosine: float | None = None,
          on_event: Event | None = None, log: Log | None = None) -> BuildResult:
    """Build PROJECT for TARGET. Returns the output directory and its manifest.

    Raises ConfigError (bad input) or PassError (a pass failed). The output directory is
    written whole or not at all.
    """
    from .passes.base import PassContext

    project = load_project(project_dir)
    profile = load_target(target)
    backend = backend or profile.backend.default
    profile.backend_config(backend)
    precision = resolve_precision(profile, backend, precision)
    # Check the data before spending minutes on export.
    project.load_data("calibration")
    project.load_data("evaluation")
    source = project_artifact(project)
    passes = plan_passes(project, profile, backend, precision, algo=algo, max_accuracy_drop=max_accuracy_drop,
                         calibration_search=calibration_search, float_fallback=float_fallback,
                         legalize=legalize, min_cosine=min_cosine)
    out_dir = Path(out) if out else default_out_dir(project, profile, backend, precision)
    cache = Cache(cache_dir, enabled=not no_cache)
    with tempfile.TemporaryDirectory(prefix="edgeforge-build-") as work:
        ctx = PassContext(project=project, target=profile, backend=backend, precision=precision,
                          workdir=Path(work), log=log or (lambda m: None))
        final, steps = Pipeline(passes, cache).run(source, ctx, on_event)
        manifest = _manifest(project, profile, backend, precision, final, steps)
        with atomic_dir(out_dir) as tmp:
            for p in final.path.iterdir():
                (shutil.copytree if p.is_dir() else shutil.copy2)(p, tmp / p.name)
            write_json_atomic(tmp / "manifest.json", manifest)
    return BuildResult(out_dir, manifest)


def _manifest(project: Project, profile: TargetProfile, backend: str, precision: str, final, steps) -> dict:
    meta = final.meta
    art = final.path / meta["file"]
    bcfg = profile.backend_config(backend)
    runtime = {"threads": profile.runtime.threads, "power_mode": profile.runtime.power_mode}
    if backend == "onnx":
        runtime["execution_providers"] = list(bcfg.execution_providers)
        runtime["provider_options"] = bcfg.provider_options(precision)   # the runner applies them
    else:
        runtime["valid_targets"] = list(bcfg.valid_targets)
    return {
        "schema": BUILD_SCHEMA,
        "name": project.name,
        "target": profile.name,
        "backend": backend,
        "precision": precision,
        "artifact": {"path": meta["file"], "sha256": sha256_file(art), "size_bytes": art.stat().st_size},
        "float_size_bytes": meta.get("float_size_bytes"),
        "steps": [s.to_json() for s in steps],
        "verify": meta["verify"],
        "inputs": [i.model_dump() for i in project.inputs],
        "reference": {"inputs": "reference/eval_inputs.npz", "outputs": "reference/float_outputs.npz",
                      "samples": meta.get("num_eval_samples")},
        "runtime": runtime,
        "target_profile": {"arch": profile.hardware.arch, "soc": profile.hardware.soc,
                           "bench": profile.bench.model_dump(mode="json")},
        "quantization": meta.get("quantization"),
        "keep_float": meta.get("keep_float", []),
        "accuracy_budget": meta.get("accuracy_budget"),
        "calibration_search": meta.get("calibration_search"),
        "rewrites": meta.get("rewrites", []),
        "toolchain": toolchain_versions(),
        "edgeforge_version": __version__,
        "host": {"machine": platform.machine(), "python": platform.python_version()},
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def read_manifest(build_dir: str | Path) -> dict:
    path = Path(build_dir) / "manifest.json"
    if not path.is_file():
        raise ConfigError(f"{build_dir} is not an edgeforge build: no manifest.json",
                          hint="run `edgeforge build` first")
    try:
        manifest = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if manifest.get("schema") != BUILD_SCHEMA:
        raise ConfigError(f"{path}: unknown schema {manifest.get('schema')!r}, this edgeforge reads {BUILD_SCHEMA}")
    return manifest


__all__ = ["build", "BuildResult", "read_manifest", "plan_passes", "EdgeforgeError"]


def check(project_dir: str | Path, target: str, *, backend: str | None = None) -> dict:
    """Pre-flight: export (cached), legalize, and list the ops the target cannot take."""
    from .passes import legalize
    from .passes.export import ExportPass
    from .passes.base import PassContext

    project = load_project(project_dir)
    profile = load_target(target)
    backend = backend or profile.backend.default
    bcfg = profile.backend_config(backend)
    vt = list(getattr(bcfg, "valid_targets", []))
    with tempfile.TemporaryDirectory(prefix="edgeforge-check-") as work:
        ctx = PassContext(project=project, target=profile, backend=backend,
                          precision=profile.precision_for(backend), workdir=Path(work))
        exported, _ = Pipeline([ExportPass()], Cache()).run(project_artifact(project), ctx)
        legal = Path(work) / "legal"
        legal.mkdir()
        rewrites = legalize.legalize_model(exported.path, legal, backend, vt)
        findings = legalize.preflight(legal, backend, vt)
        num_ops = _count_ops(legal)
    return {"name": project.name, "target": profile.name, "backend": backend, "rewrites": rewrites,
            "findings": [f.__dict__ if hasattr(f, "__dict__") else dict(f) for f in findings], "num_ops": num_ops}


def _count_ops(model_dir: Path) -> int:
    from .paddle_env import load_program, private_scope, static_mode

    with static_mode() as paddle, private_scope(paddle) as (_, exe):
        prog, _, _ = load_program(model_dir, exe)
        return sum(1 for op in prog.global_block().ops if op.type not in ("feed", "fetch"))
