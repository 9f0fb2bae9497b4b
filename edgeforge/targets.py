"""Target profiles: hardware facts, backend, precision, quantization, runtime and bench defaults.

Profiles are data, in ``targets/*.toml``. Unknown keys and unknown names are errors.
"""
from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, model_validator

from .config import Strict, did_you_mean, parse_model, read_toml
from .errors import ConfigError

Precision = Literal["int8", "fp16", "fp32"]
BackendKind = Literal["lite", "onnx"]
CalibrationAlgo = Literal["KL", "hist", "mse", "avg", "abs_max"]


class Hardware(Strict):
    arch: Literal["arm64", "armv7", "x86_64"]
    soc: str
    cpu: str
    cores: int = Field(gt=0)
    memory_mb: int = Field(gt=0)
    fast_int8: bool = Field(description="the CPU/accelerator has fast INT8 kernels (dot-product, tensor cores)")
    fast_fp16: bool = False
    accelerators: list[str] = []


class LiteBackend(Strict):
    valid_targets: list[str]
    precision: Optional[Precision] = None  # overrides the target default for this backend
    host_runnable: bool = False             # the x86 Paddle Lite runtime can run this artifact here


class OnnxBackend(Strict):
    execution_providers: list[str]
    opset: int = 13
    precision: Optional[Precision] = None
    host_runnable: bool = True


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
    calibration_batches: int = Field(default=10, gt=0)
    batch_size: int = Field(default=32, gt=0)
    per_channel_weights: bool = True
    keep_float: list[str] = []              # layer (op output) names kept in float
    max_accuracy_drop: float = Field(default=1.0, ge=0)  # points of accuracy (evaluation set with labels)
    min_cosine: float = Field(default=0.99, gt=0, le=1)   # worst-output cosine (evaluation set without labels)


class Runtime(Strict):
    threads: int = Field(default=1, gt=0)
    power_mode: Optional[str] = None        # LITE_POWER_HIGH, nvpmodel mode, ...
    power_modes: list[str] = []             # what a sweep may try


class Bench(Strict):
    warmups: int | Literal["auto"] = "auto"
    runs: int = Field(default=100, gt=0)
    connect_timeout_s: float = Field(default=10, gt=0)
    command_timeout_s: float = Field(default=600, gt=0)
    runner: Literal["python", "benchmark_bin"] = "python"


class TargetProfile(Strict):
    name: str
    description: str
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
        return Path(env)
    here = Path(__file__).resolve().parent
    # a checkout, then a wheel install (pyproject data-files: <prefix>/share/edgeforge/targets)
    for cand in (here / "targets", here.parent / "targets", Path(sys.prefix) / "share" / "edgeforge" / "targets"):
        if cand.is_dir():
            return cand
    raise ConfigError("no targets/ directory found; set EDGEFORGE_TARGETS to one")


def list_targets(directory: Path | None = None) -> list[str]:
    directory = directory or targets_dir()
    return sorted(p.stem for p in directory.glob("*.toml"))


@lru_cache(maxsize=64)
def _load(path: Path) -> TargetProfile:
    data = read_toml(path)
    profile = parse_model(TargetProfile, data, f"targets/{path.name}")
    if profile.name != path.stem:
        raise ConfigError(f"targets/{path.name}: name '{profile.name}' does not match the file name")
    return profile


def load_target(name: str, directory: Path | None = None) -> TargetProfile:
    directory = directory or targets_dir()
    path = directory / f"{name}.toml"
    if not path.is_file():
        names = list_targets(directory)
        raise ConfigError(
            f"unknown target '{name}'{did_you_mean(name, names)}",
            hint="run `edgeforge targets` to list them",
        )
    return _load(path.resolve())
