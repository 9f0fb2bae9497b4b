"""The build plan as data: which passes make a build, by backend and precision.

:data:`PLAN` lists, for each (backend, precision), the passes between export and verify, by
name; a step with a condition runs only when the build asks for it (``prune``, ``legalize``,
``qat``). :data:`REFUSALS` lists the options that do not combine, each with its message.
:func:`plan_passes` reads both, builds each step's config (:data:`CONFIGS`) and resolves each
name through :data:`edgeforge.passes.base.REGISTRY`. Outside the build code
(``cache.BUILD_CODE``): what it decides is in each step's key (the pass, its config, its input).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Optional

from .cache import digest_files, sha256_file
from .errors import ConfigError
from .options import ResolvedBuild
from .project import Project
from .quant.budget import DEFAULT_MAX_SECONDS
# the pass modules: importing them registers their passes in REGISTRY
from .passes import export, legalize, lite, onnx, prune, qat, quantize, verify
from .passes.base import REGISTRY, Pass

Flag = Literal["prune", "legalize", "qat"]


@dataclass(frozen=True)
class Step:
    name: str                        # a REGISTRY name
    when: Optional[Flag] = None      # None: always


HEAD = (Step("export"), Step("prune", "prune"), Step("legalize", "legalize"))
TAIL = (Step("verify"),)
LITE_INT8 = (Step("quantize.ptq"), Step("quantize.qat", "qat"), Step("legalize.int8", "legalize"))
# (backend, precision) -> the passes between export (+ prune, legalize) and verify, in order
PLAN: dict[tuple[str, str], tuple[Step, ...]] = {
    ("lite", "int8"): LITE_INT8 + (Step("convert.lite"),),
    ("lite", "fp16"): (Step("convert.lite"),),
    ("lite", "fp32"): (Step("convert.lite"),),
    ("onnx", "int8"): (Step("convert.onnx"), Step("quantize.onnx"), Step("quantize.qat", "qat")),
    ("onnx", "fp16"): (Step("convert.onnx"), Step("fp16.onnx")),
    ("onnx", "fp32"): (Step("convert.onnx"),),
}


@dataclass(frozen=True)
class Refusal:
    both: tuple[str, str]            # two facts of the build (see :func:`_facts`) that do not combine
    message: str
    hint: str


# checked in this order: the first that applies is the one error (exit 2)
REFUSALS = (
    Refusal(("fold", "qat"), "--qat trains the factory's layer, and [preprocess] fold = true exports it "
                             "wrapped: they do not combine", "drop --qat, or use fold = false"),
    Refusal(("fold", "prune"), "--prune rebuilds the factory's layer, and [preprocess] fold = true exports it "
                               "wrapped: they do not combine", "drop --prune, or use fold = false"),
    Refusal(("prune", "qat"), "--prune and --qat together are not supported: QAT rebuilds the unpruned "
                              "model from its factory", "drop one of them"),
)


@dataclass(frozen=True)
class PlanInputs:
    """What the step configs are made of: the project, the resolved build, and what
    :func:`plan_passes` worked out once (the quantization config, the program route ...)."""
    project: Project
    build: ResolvedBuild
    route: str
    prune_flops: Optional[float]
    quant: object                    # passes.quantize.QuantConfig
    eval_digest: str


def _facts(project: Project, build: ResolvedBuild, prune_flops: Optional[float]) -> set[str]:
    """The build's facts the refusals name: fold ([preprocess] fold = true), qat (--qat asked),
    prune (--prune or [prune] flops)."""
    return {name for name, on in (("fold", project.fold is not None), ("qat", bool(build.qat)),
                                  ("prune", prune_flops is not None)) if on}


def check_combinations(project: Project, build: ResolvedBuild, prune_flops: Optional[float]) -> None:
    """The one check of :data:`REFUSALS`: a ConfigError (exit 2) for the first that applies."""
    facts = _facts(project, build, prune_flops)
    for r in REFUSALS:
        if set(r.both) <= facts:
            raise ConfigError(r.message, hint=r.hint)


def _qat_config(i: PlanInputs):
    b = i.build
    opset = 13 if b.backend == "lite" else b.backend_config.opset
    return qat.qat_config(i.project.spec.quantization.qat, i.quant, bool(b.qat), opset, backend=b.backend)


def _prune_config(i: PlanInputs):
    sec = i.project.spec.prune
    return prune.PruneConfig(flops=i.prune_flops, steps=sec.steps, max_seconds=sec.max_seconds, lr=sec.lr,
                             batch_size=sec.batch_size, quant=i.quant)


def _verify_config(i: PlanInputs):
    spec = i.project.spec
    return verify.VerifyConfig(
        host_runnable=i.build.backend_config.host_runnable, max_accuracy_drop=i.build.max_accuracy_drop,
        min_cosine=i.build.min_cosine, data_digest=i.eval_digest,
        task=spec.task.model_dump() if spec.task is not None else None,
        preprocess=spec.preprocess.model_dump() if spec.preprocess is not None else None,
        postprocess=spec.postprocess.model_dump() if spec.postprocess is not None else None,
        images_digest=_images_digest(i.project))


def _legalize_config(i: PlanInputs):
    return legalize.LegalizeConfig(backend=i.build.backend, valid_targets=i.build.valid_targets)


# pass name -> its config for this build (a pass not listed takes its default config)
CONFIGS: dict[str, Callable[[PlanInputs], object]] = {
    "export": lambda i: export.ExportConfig(route=i.route),
    "prune": _prune_config,
    "legalize": _legalize_config,
    "legalize.int8": _legalize_config,
    "quantize.ptq": lambda i: i.quant,
    "quantize.onnx": lambda i: i.quant,
    "quantize.qat": _qat_config,
    "convert.lite": lambda i: lite.LiteConvertPass.Config(valid_targets=i.build.valid_targets,
                                                          fp16=i.build.precision == "fp16"),
    "convert.onnx": lambda i: onnx.OnnxConvertPass.Config(opset=i.build.backend_config.opset,
                                                          nms=i.build.backend_config.nms),
    "verify": _verify_config,
}


def steps_for(backend: str, precision: str, flags: set[str]) -> list[str]:
    """The pass names of a build, in order: the table's row with the conditions applied."""
    row = HEAD + PLAN[(backend, precision)] + TAIL
    return [s.name for s in row if s.when is None or s.when in flags]


def plan_passes(project: Project, build: ResolvedBuild, route: str | None = None) -> list[Pass]:
    """The passes that make ``build`` of ``project``, in order; ``route``: the program format
    export writes (``passes.export.routes_for``: the backend's first by default)."""
    prune_flops = build.prune if build.prune is not None else project.spec.prune.flops
    check_combinations(project, build, prune_flops)
    qat_auto = project.spec.quantization.qat.auto and project.fold is None
    qat_on = prune_flops is None and build.qat is not False and (build.qat or qat_auto)
    flags = {name for name, on in (("prune", prune_flops is not None), ("legalize", build.legalize),
                                   ("qat", qat_on)) if on}
    # prune saves a legacy program (prune_tune), and fold was checked on legacy programs only:
    # the export takes that route for both
    if route is None:
        route = ("legacy" if prune_flops is not None or project.fold is not None
                 else export.routes_for(project, build.backend, build.target)[0])
    inputs = PlanInputs(project, build, route, prune_flops, _quant_config(project, build), _eval_digest(project))
    return [REGISTRY[name](CONFIGS[name](inputs) if name in CONFIGS else None)
            for name in steps_for(build.backend, build.precision, flags)]


def _quant_config(project: Project, build: ResolvedBuild):
    q = build.target.quantization
    return quantize.QuantConfig(
        algo=build.algo, algo_fixed=build.algo_fixed, calibration_batches=q.calibration_batches,
        batch_size=q.batch_size, per_channel_weights=q.per_channel_weights, keep_float=list(build.keep_float),
        max_accuracy_drop=build.max_accuracy_drop, min_cosine=build.min_cosine,
        calibration_search=build.calibration_search, float_fallback=build.float_fallback,
        max_seconds=(build.max_search_seconds or project.spec.quantization.max_seconds or DEFAULT_MAX_SECONDS),
        data_digest=_digest_or_empty(project.path(project.spec.data.calibration)),
        eval_digest=_eval_digest(project))


def _eval_digest(project: Project) -> str:
    digest = _digest_or_empty(project.path(project.spec.data.evaluation))
    if project.spec.data.label_output:      # which output the labels are for: part of what they mean
        digest += f"+label_output:{project.spec.data.label_output}"
    return digest


def _images_digest(project: Project) -> str:
    """The [preprocess] images (the parity check reads them)."""
    pre = project.spec.preprocess
    folder = project.path(pre.images) if pre is not None else None
    if folder is None or not folder.is_dir():
        return ""
    return digest_files((p.name, p) for p in sorted(folder.iterdir()) if p.is_file())


def _digest_or_empty(path: Path) -> str:
    return sha256_file(path) if path.is_file() else ""
