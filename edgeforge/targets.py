"""Target profiles: hardware facts, backend, precision, quantization, runtime and bench defaults.

Profiles are data, in ``targets/*.toml``. Unknown keys and unknown names are errors.
"""
from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from .config import NAME_WORDS, Strict, did_you_mean, parse_model, read_toml
from .errors import ConfigError

Precision = Literal["int8", "fp16", "fp32"]
BackendKind = Literal["lite", "onnx"]
CalibrationAlgo = Literal["KL", "hist", "mse", "avg", "abs_max"]

# Caps on a target's numbers: a typo (threads = 100000000000) is refused naming the file and key,
# before a device or a calibration run pays for it.
MAX_CORES = 1024
MAX_THREADS = 256
MAX_CALIBRATION_BATCHES = 10_000
MAX_BATCH_SIZE = 4096
MAX_RUNS = 100_000
MAX_WARMUPS = 10_000
MAX_CONNECT_TIMEOUT_S = 3600.0          # an hour
MAX_COMMAND_TIMEOUT_S = 86400.0         # a day


class Hardware(Strict):
    arch: Literal["arm64", "armv7", "x86_64", "wasm32"]   # wasm32: a browser (web-*)
    soc: str
    cpu: str
    cores: int = Field(gt=0, le=MAX_CORES)


class Refusal(Strict):
    """A precision the backend's runtime cannot run correctly here: a build asking for it stops
    (exit 2) with this one line and hint."""
    reason: str = Field(min_length=1, max_length=200)
    hint: str = Field("", max_length=200)


class LiteBackend(Strict):
    valid_targets: list[str]
    precision: Optional[Precision] = None  # overrides the target default for this backend
    host_runnable: bool = False             # the x86 Paddle Lite runtime can run this artifact here
    refuse: dict[Precision, Refusal] = {}   # what this runtime cannot run correctly

    @model_validator(mode="after")
    def _x86_refuses_what_it_gets_wrong(self):
        # Paddle Lite 2.13's x86 INT8 kernels give wrong outputs and its fp16 needs arm
        # (TOOLCHAIN traps 4): a profile that offers them must say so in [backend.lite.refuse]
        if "arm" not in self.valid_targets and not {"int8", "fp16"} <= set(self.refuse):
            raise ValueError("a Lite backend without the arm valid target must refuse int8 and fp16 "
                             "([backend.lite.refuse.int8], [backend.lite.refuse.fp16])")
        return self


IntType = Literal["int8", "uint8"]
TYPE_RANGE = {"int8": (-128, 127), "uint8": (0, 255)}


class QuantScheme(Strict):
    """What quantize.onnx writes: the QDQ types and ranges the target's runtime computes fastest
    and exactly. Written with onnxruntime's ``quantize_static``."""
    activations: IntType = "uint8"
    weights: IntType = "int8"
    symmetric_activations: bool = False      # zero point 0 on every activation
    symmetric_weights: bool = True           # int8 weights in [-127, 127], zero point 0
    reduce_range: bool = False               # 7-bit weights (u8s8 saturation on AVX2 without VNNI)
    per_channel_axis: int = Field(0, ge=0, le=7)   # Conv weight axis of the per-channel scales
    quantize_bias: bool = True               # int32 bias behind a DequantizeLinear


class EpRules(Strict):
    """What an execution provider accepts in a QDQ graph; verify checks the artifact against the
    first provider's rules."""
    activation_types: list[IntType] = ["int8", "uint8"]
    weight_types: list[IntType] = ["int8", "uint8"]
    zero_point_zero: bool = False            # every zero point must be 0 (symmetric only)
    activation_range: tuple[int, int] = Field((-128, 255), strict=False)   # a TOML list
    weight_range: tuple[int, int] = Field((-128, 255), strict=False)
    int32_dequantize: bool = True            # a DequantizeLinear may read int32 (quantized bias)
    per_tensor_activations: bool = False     # an activation's scale must be a scalar
    constant_scales: bool = False            # scales and zero points must be initializers
    conv_weight_axis: Optional[int] = Field(None, ge=0, le=7)  # per-channel Conv weights only on this axis
    max_opset: Optional[int] = Field(None, ge=7, le=30)  # the newest ai.onnx opset the runtime loads
    domains: list[str] = []                  # op domains it runs ("" is ai.onnx); empty: any
    note: str = ""


class OnnxBackend(Strict):
    execution_providers: list[str]
    opset: int = Field(13, ge=7, le=30)
    precision: Optional[Precision] = None
    host_runnable: bool = True
    # multiclass_nms3 in the model: in the ONNX graph ("graph", at any batch), or out of it and
    # run by the runner as post-processing ("postprocess": a runtime without NMS, TensorRT's INT8)
    nms: Literal["graph", "postprocess"] = "graph"
    scheme: QuantScheme = QuantScheme()
    # schemes for a target that is the build host itself (linux-x86): the first whose CPU flag the
    # host's /proc/cpuinfo lists replaces ``scheme``
    host_cpu_schemes: dict[str, QuantScheme] = {}
    rules: dict[str, EpRules] = {}           # execution provider -> what it accepts
    refuse: dict[Precision, Refusal] = {}    # what this runtime cannot run correctly

    @model_validator(mode="after")
    def _rules_for_first_provider(self):
        if not self.execution_providers:
            raise ValueError("execution_providers is empty")
        unknown = sorted(set(self.rules) - set(self.execution_providers))
        if unknown:
            raise ValueError(f"rules for providers not in execution_providers: {', '.join(unknown)}")
        if self.execution_providers[0] not in self.rules:
            raise ValueError(f"no [backend.onnx.rules.{self.execution_providers[0]}] table: "
                             "verify checks artifacts against the first provider's rules")
        return self

    def first_provider(self) -> tuple[str, EpRules]:
        ep = self.execution_providers[0]
        return ep, self.rules[ep]

    def scheme_for(self, host_flags: frozenset[str] | set[str] = frozenset()) -> tuple[QuantScheme, str | None]:
        """The scheme to write and the CPU flag that chose it (None: the default scheme)."""
        for flag, scheme in self.host_cpu_schemes.items():
            if flag in host_flags:
                return scheme, flag
        return self.scheme, None

    def provider_options(self, precision: str) -> dict[str, dict]:
        """Per-provider options the device runner applies (TensorRT: INT8/FP16 from the precision)."""
        out: dict[str, dict] = {}
        if "TensorrtExecutionProvider" in self.execution_providers:
            out["TensorrtExecutionProvider"] = {"trt_int8_enable": precision == "int8",
                                                "trt_fp16_enable": precision in ("int8", "fp16")}
        return out


class Backends(Strict):
    default: BackendKind
    lite: Optional[LiteBackend] = None
    onnx: Optional[OnnxBackend] = None

    @model_validator(mode="after")
    def _default_present(self):
        if getattr(self, self.default) is None:
            raise ValueError(f"default backend '{self.default}' has no [backend.{self.default}] table")
        return self


class Quantization(Strict):
    algo: CalibrationAlgo = "KL"
    calibration_batches: int = Field(default=10, gt=0, le=MAX_CALIBRATION_BATCHES)
    batch_size: int = Field(default=32, gt=0, le=MAX_BATCH_SIZE)
    per_channel_weights: bool = True
    keep_float: list[str] = []              # layer (op output) names kept in float
    max_accuracy_drop: float = Field(default=1.0, ge=0, le=100)  # points of accuracy (evaluation set with labels)
    min_cosine: float = Field(default=0.99, gt=0, le=1)   # worst-output cosine (evaluation set without labels)


class Runtime(Strict):
    threads: int = Field(default=1, gt=0, le=MAX_THREADS)
    power_mode: Optional[str] = None        # LITE_POWER_HIGH, nvpmodel mode, ...
    power_modes: list[str] = []             # what a sweep may try


class Bench(Strict):
    warmups: int | Literal["auto"] = "auto"
    runs: int = Field(default=100, gt=0, le=MAX_RUNS)
    connect_timeout_s: float = Field(default=10, gt=0, le=MAX_CONNECT_TIMEOUT_S)
    command_timeout_s: float = Field(default=600, gt=0, le=MAX_COMMAND_TIMEOUT_S)
    runner: Literal["python", "benchmark_bin"] = "python"

    @field_validator("warmups")
    @classmethod
    def _warmups(cls, v):
        if v != "auto" and not 0 <= v <= MAX_WARMUPS:
            raise ValueError(f"must be 'auto' or from 0 to {MAX_WARMUPS}")
        return v


class TargetProfile(Strict):
    name: str
    description: str
    # `--target FAMILY` (jetson, rpi, android, linux) builds the family's one default profile
    family: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    family_default: bool = False
    hardware: Hardware
    backend: Backends
    precision: Precision
    quantization: Quantization = Quantization()
    runtime: Runtime = Runtime()
    bench: Bench = Bench()

    def backend_config(self, kind: str | None = None):
        kind = kind or self.backend.default
        cfg = getattr(self.backend, kind, None)
        if cfg is None:
            have = [k for k in ("lite", "onnx") if getattr(self.backend, k) is not None]
            raise ConfigError(
                f"target {self.name} has no '{kind}' backend; it offers: {', '.join(have)}"
            )
        return cfg

    def backends(self) -> list[str]:
        return [k for k in ("lite", "onnx") if getattr(self.backend, k) is not None]

    def precision_for(self, kind: str | None = None) -> str:
        cfg = self.backend_config(kind)
        return cfg.precision or self.precision


def targets_dir() -> Path:
    env = os.environ.get("EDGEFORGE_TARGETS")
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise ConfigError(f"EDGEFORGE_TARGETS={env}: not a directory",
                              hint="point EDGEFORGE_TARGETS at a directory of target .toml files")
        return path
    here = Path(__file__).resolve().parent
    # a wheel install (setup.py copies targets/ into the package), then a checkout's targets/
    for cand in (here / "targets_data", here.parent / "targets"):
        if cand.is_dir():
            return cand
    raise ConfigError("no targets/ directory found; set EDGEFORGE_TARGETS to one")


def list_targets(directory: Path | None = None) -> list[str]:
    directory = directory or targets_dir()
    return sorted(p.stem for p in directory.glob("*.toml") if p.is_file())


@lru_cache(maxsize=64)
def _load(path: Path, _stamp: tuple = ()) -> TargetProfile:
    """The profile at ``path``; errors name that real path (``$EDGEFORGE_TARGETS`` may move it).
    ``_stamp`` (mtime, size) keys the cache: an edited file is read again."""
    data = read_toml(path, "target profile")
    profile = parse_model(TargetProfile, data, str(path))
    if profile.name != path.stem:
        raise ConfigError(f"{path}: name '{profile.name}' does not match the file name")
    return profile


def families(directory: Path | None = None) -> dict[str, list[TargetProfile]]:
    """{family: its profiles, the default first}; a profile without a family is its own."""
    out: dict[str, list[TargetProfile]] = {}
    for name in list_targets(directory):
        t = load_target(name, directory)
        out.setdefault(t.family or t.name, []).append(t)
    for members in out.values():
        members.sort(key=lambda t: (not t.family_default, t.name))
    return dict(sorted(out.items()))


def _label(member: TargetProfile, family: str) -> str:
    """'a Nano' (jetson-nano), 'a Raspberry Pi 5' (the description up to its ':'), or 'that one'."""
    rest = member.name[len(family) + 1:] if member.name.startswith(family + "-") else ""
    if rest.isalpha():
        return f"a {rest.capitalize()}"
    lead = member.description.split(":", 1)[0].strip()
    return f"a {lead}" if ":" in member.description and len(lead) <= 24 else "that one"


def resolve_target(name: str, directory: Path | None = None) -> tuple[str, str | None]:
    """The profile name ``name`` means, and the one line to say when it named a family
    ("jetson → jetson-orin (also: jetson-nano; pass --target jetson-nano for a Nano)").
    A family with no default (or two) is a ConfigError listing its members."""
    _check_name(name)
    directory = directory or targets_dir()
    if (directory / f"{name}.toml").is_file():
        return name, None
    names = list_targets(directory)
    members = [t for t in (load_target(n, directory) for n in names) if t.family == name]
    if not members:
        fams = sorted({t.family for t in (load_target(n, directory) for n in names) if t.family})
        raise ConfigError(f"unknown target '{name}'{did_you_mean(name, names + fams)}",
                          hint="run `edgeforge targets` to list them")
    defaults = [t.name for t in members if t.family_default]
    listed = ", ".join(t.name for t in members)
    if len(defaults) != 1:
        why = "no default" if not defaults else f"{len(defaults)} defaults ({', '.join(defaults)})"
        raise ConfigError(f"target family '{name}' has {why}: pass one of {listed}",
                          hint="or mark one profile `family_default = true`")
    pick = defaults[0]
    others = [t for t in members if t.name != pick]
    if not others:
        return pick, f"{name} → {pick}"
    tail = (f"pass --target {others[0].name} for {_label(others[0], name)}" if len(others) == 1
            else "pass --target NAME for one of those")
    return pick, f"{name} → {pick} (also: {', '.join(t.name for t in others)}; {tail})"


def _check_name(name) -> None:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ConfigError(f"target name {name!r} is not a name: it may hold only {NAME_WORDS} "
                          "(no path separators)", hint="run `edgeforge targets` to list them")


def load_target(name: str, directory: Path | None = None) -> TargetProfile:
    """The profile ``name``, or the default profile of the family ``name`` (jetson, rpi ...)."""
    _check_name(name)
    directory = directory or targets_dir()
    path = directory / f"{name}.toml"
    if not path.is_file():
        name, _ = resolve_target(name, directory)
        path = directory / f"{name}.toml"
    path = path.resolve()
    try:
        st = path.stat()
    except OSError:
        st = None
    return _load(path, (st.st_mtime_ns, st.st_size) if st else ())
