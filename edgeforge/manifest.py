"""The build manifest (``manifest.json``, schema ``edgeforge.build/1``) and the metadata the
passes hand each other on the way to it.

:class:`~edgeforge.build_meta.BuildMeta` (edgeforge/build_meta.py) is what the last pass's
``meta`` holds. Every field that is not marked ``internal`` there goes into the manifest as it
is. Keys a pass adds that are not declared there travel on between passes but stay out of the
manifest.
"""
from __future__ import annotations

import datetime as _dt
import json
import platform
from pathlib import Path
from typing import Optional

import re
from enum import Enum
from typing import Annotated, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from . import __version__
from .build_meta import as_meta
from .cache import sha256_file
from .config import DTypes
from .errors import ConfigError
from .fsutil import read_config_text

BUILD_SCHEMA = "edgeforge.build/1"

# Paddle and ONNX tensor names as edgeforge's builds produce them: ``x``, ``image``,
# ``save_infer_model/scale_0.tmp_0``. No quotes, spaces, shell or path metacharacters.
TENSOR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:/-]{0,127}$")
TENSOR_NAME_WORDS = ("a tensor name: a letter or '_', then at most 127 letters, digits or "
                     "'_.:/-'")
RESERVED_NAMES = {"labels"}          # a key of the reference inputs' .npz beside the inputs
MAX_INPUTS, MAX_RANK, MAX_DIM = 64, 8, 1 << 20
MAX_THREADS = 1024


def _tensor_name(v: str) -> str:
    if not TENSOR_NAME.match(v):
        raise ValueError(f"must be {TENSOR_NAME_WORDS}")
    if v in RESERVED_NAMES:
        raise ValueError(f"'{v}' is reserved (the reference data's labels)")
    return v


TensorName = Annotated[str, AfterValidator(_tensor_name)]     # edgeforge.toml's input names too


def _dim(v: Optional[int]) -> Optional[int]:
    if v is not None and v != -1 and not 1 <= v <= MAX_DIM:
        raise ValueError(f"a dimension must be 1..{MAX_DIM}, or -1/null for a free one")
    return v


def _word(v: str) -> str:
    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$", v):
        raise ValueError("must be a plain word (letters, digits, '_.:-', at most 64)")
    return v


Word = Annotated[str, AfterValidator(_word)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


RangeShape = Optional[list[Annotated[int, Field(ge=1, le=MAX_DIM)]]]


class InputDoc(_Strict):
    name: Annotated[str, AfterValidator(_tensor_name)]
    shape: list[Annotated[Optional[int], AfterValidator(_dim)]] = Field(min_length=1,
                                                                        max_length=MAX_RANK)
    dtype: DTypes
    # a free dimension's declared range (edgeforge.toml [[model.inputs]]); absent without one
    min_shape: RangeShape = Field(None, max_length=MAX_RANK)
    opt_shape: RangeShape = Field(None, max_length=MAX_RANK)
    max_shape: RangeShape = Field(None, max_length=MAX_RANK)


TRT_PROFILE_KEYS = {"min_shape": "trt_profile_min_shapes", "opt_shape": "trt_profile_opt_shapes",
                    "max_shape": "trt_profile_max_shapes"}


def trt_profile(inputs: list[dict]) -> dict | None:
    """TensorRT's optimisation profile of the declared ranges, as onnxruntime's TensorRT EP options
    take it: ``{"trt_profile_min_shapes": "x:1x3x48x32", ...opt..., ...max...}`` (inputs joined
    by ","). None when no input declares a range. ``complete`` says whether every input with a
    free dimension is in it (TensorRT needs them all in an explicit profile)."""
    ranged = [i for i in inputs if i.get("min_shape") is not None]
    if not ranged:
        return None
    doc = {key: ",".join(f"{i['name']}:" + "x".join(str(d) for d in i[k]) for i in ranged)
           for k, key in TRT_PROFILE_KEYS.items()}
    left = [i["name"] for i in inputs if i.get("min_shape") is None and any(d in (-1, None) for d in i["shape"])]
    doc["complete"] = not left
    if left:
        doc["note"] = (f"inputs {', '.join(left)} have a free batch and no declared range: not in the "
                       "profile, so the runner does not apply it (declare min_shape/opt_shape/max_shape "
                       "for them too)")
    return doc


class ArtifactDoc(_Strict):
    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")      # names the remote directory
    size_bytes: Optional[int] = Field(None, ge=0)


class ReferenceDoc(_Strict):
    inputs: str
    outputs: str
    samples: Optional[int] = Field(None, ge=0)
    evaluation_samples: Optional[int] = Field(None, ge=0)    # the host verified them all
    raw_bytes: Optional[int] = Field(None, ge=0)
    bytes: Optional[int] = Field(None, ge=0)                 # compressed: what the device gets
    confidence: Optional[str] = Field(None, max_length=300)
    host_drift: Optional[dict[str, Optional[float]]] = None  # verify's figures on the shipped samples
    images: Optional[list[str]] = Field(None, max_length=16)   # [preprocess] raw images: bench --end-to-end


class RuntimeDoc(_Strict):
    threads: Optional[int] = Field(None, ge=1, le=MAX_THREADS)
    power_mode: Optional[Word] = None
    execution_providers: Optional[list[Word]] = Field(None, max_length=16)
    valid_targets: Optional[list[Word]] = Field(None, max_length=16)
    provider_options: Optional[dict] = None


class CacheSource(str, Enum):
    """Where a build step's output came from: one fact, one field (``source`` in the steps)."""

    BUILT = "built"            # the pass ran here (a cache miss)
    LOCAL = "local"            # the local cache
    REMOTE = "remote"          # the remote cache

    @property
    def hit(self) -> bool:
        return self is not CacheSource.BUILT

    @property
    def label(self) -> str:
        """What a person reads: 'miss', 'hit', 'remote hit'."""
        return {"built": "miss", "local": "hit", "remote": "remote hit"}[self.value]


class StepDoc(BaseModel):
    """One entry of the manifest's ``steps``. Builds before the one ``source`` field said it
    three ways (``cache_hit``, ``cache``: 'hit'/'remote hit'/'miss', ``source``): read into it."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    pass_: str = Field(alias="pass", max_length=64)
    version: Optional[int] = None
    source: CacheSource
    seconds: float = Field(ge=0, allow_inf_nan=False)
    cache_key: Optional[str] = Field(None, max_length=128)

    @model_validator(mode="before")
    @classmethod
    def _earlier_form(cls, data):
        if not isinstance(data, dict) or ("cache_hit" not in data and "cache" not in data):
            return data
        data = dict(data)
        hit, said = data.pop("cache_hit", None), data.pop("cache", None)
        if "source" not in data:
            data["source"] = ("remote" if said == "remote hit" else "local" if said == "hit" or hit is True
                              else "built")
        return data

    @property
    def hit(self) -> bool:
        return self.source.hit


def manifest_steps(manifest: dict) -> list[StepDoc]:
    """The build's steps, parsed (any manifest edgeforge.build/1 wrote, earlier forms included)."""
    return [StepDoc.model_validate(s) for s in manifest.get("steps") or []]


class Manifest(BaseModel):
    """``manifest.json`` (edgeforge.build/1): the fields every reader relies on, strictly; the
    rest (steps, verify, quantization, ...) kept as written. The writer validates through it."""
    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)
    schema_: str = Field(alias="schema", pattern=r"^edgeforge\.build/1$")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    target: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    backend: Literal["lite", "onnx"]
    precision: Literal["int8", "fp16", "fp32"]
    artifact: ArtifactDoc
    inputs: list[InputDoc] = Field(min_length=1, max_length=MAX_INPUTS)
    reference: Optional[ReferenceDoc] = None
    float_artifact: Optional[ArtifactDoc] = None    # an INT8 build's fp32 sibling: bench times both
    runtime: RuntimeDoc = RuntimeDoc()
    target_profile: dict[str, Union[str, int, float, bool, None, dict]] = {}
    steps: list[StepDoc] = Field([], max_length=64)


def _file_doc(root: Path, rel: str) -> dict:
    return {"path": rel, "sha256": sha256_file(root / rel), "size_bytes": (root / rel).stat().st_size}


def build_manifest(project, build, final, steps, toolchain: dict) -> dict:
    """The manifest of ``build`` (a ResolvedBuild) of ``project``: ``final`` is the last
    pass's artifact, ``steps`` the pipeline's step records."""
    meta = as_meta(final.meta)
    target, backend, precision = build.target, build.backend, build.precision
    art = final.path / meta.file
    bcfg = build.backend_config
    # a power mode is Paddle Lite's (onnxruntime has none): an ONNX manifest records none
    runtime = {"threads": target.runtime.threads,
               "power_mode": target.runtime.power_mode if backend == "lite" else None}
    inputs = [i.model_dump() for i in project.inputs]
    profile = None
    if backend == "onnx":
        runtime["execution_providers"] = list(bcfg.execution_providers)
        runtime["provider_options"] = bcfg.provider_options(precision)   # the runner applies them
        if bcfg.execution_providers[0] == "TensorrtExecutionProvider":
            profile = trt_profile(inputs)
        if profile is not None and profile["complete"]:     # TensorRT builds one engine for the range
            runtime["provider_options"]["TensorrtExecutionProvider"].update(
                {k: profile[k] for k in TRT_PROFILE_KEYS.values()})
    else:
        runtime["valid_targets"] = list(bcfg.valid_targets)
    doc = {
        "schema": BUILD_SCHEMA,
        "name": project.name,
        "target": target.name,
        "backend": backend,
        "precision": precision,
        "artifact": {"path": meta.file, "sha256": sha256_file(art), "size_bytes": art.stat().st_size},
        **({"float_artifact": _file_doc(final.path, meta.float_file)}
           if meta.float_file and meta.precision == "int8" and (final.path / meta.float_file).is_file() else {}),
        "steps": [s.to_json() for s in steps],
        **meta.manifest_fields(),
        "inputs": inputs,
        **({"trt_profile": profile} if profile is not None else {}),
        "reference": {"inputs": "reference/eval_inputs.npz",
                      "outputs": "reference/float_outputs.npz",
                      "samples": meta.num_eval_samples,
                      **(meta.device_reference or {}),
                      **({"images": meta.reference_images} if meta.reference_images else {})},
        "runtime": runtime,
        "target_profile": {"arch": target.hardware.arch, "soc": target.hardware.soc,
                           "bench": target.bench.model_dump(mode="json")},
        "toolchain": toolchain,
        "edgeforge_version": __version__,
        "host": {"machine": platform.machine(), "python": platform.python_version()},
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    # the model every reader checks (edgeforge.device.link.buildcheck): a build never writes a
    # manifest its own device verbs would refuse
    Manifest.model_validate(json.loads(json.dumps(doc)))
    return doc


def read_manifest(build_dir: str | Path) -> dict:
    path = Path(build_dir) / "manifest.json"
    if not path.is_file():
        raise ConfigError(f"{build_dir} is not an edgeforge build: no manifest.json",
                          hint="run `edgeforge build` first")
    try:
        manifest = json.loads(read_config_text(path, "build manifest"))
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise ConfigError(f"{path}: not an edgeforge build manifest (a JSON {type(manifest).__name__})",
                          hint="rebuild with `edgeforge build`")
    if manifest.get("schema") != BUILD_SCHEMA:
        raise ConfigError(f"{path}: unknown schema {manifest.get('schema')!r}, "
                          f"this edgeforge reads {BUILD_SCHEMA}")
    return manifest
