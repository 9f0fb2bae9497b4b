"""The pass protocol and registry.

A pass turns one artifact into another. It declares a name, a version (bump it to invalidate
cached outputs), the artifact kinds it consumes and the kind it produces, a typed config, and
which parts of the target profile its output depends on (they go into the cache key).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from pydantic import BaseModel, ConfigDict

from ..build_meta import BuildMeta
from ..config import Strict
from ..project import Project
from ..targets import TargetProfile

# Artifact kinds
PROJECT = "project"              # a model project on disk (sources, weights, data)
PADDLE_FLOAT = "paddle.float"    # legacy static program: model.pdmodel + model.pdiparams
PADDLE_INT8 = "paddle.int8"      # quantized legacy program (+ the float one under float/)
LITE_NB = "lite.nb"              # Paddle Lite naive buffer: model.nb
ONNX = "onnx"                    # model.onnx
# An INT8 build's fp32 sibling, shipped beside its artifact: bench times the two in interleaved
# rounds on the device (manifest ``float_artifact``; report/int8_procedure.py)
FLOAT_FILE_ONNX, FLOAT_FILE_LITE = "float/model.onnx", "float/model.nb"
VERIFIED = "verified"            # an artifact plus reference data and verify figures


@dataclass
class Artifact:
    kind: str
    path: Path                   # a directory
    meta: BuildMeta = field(default_factory=BuildMeta)    # read by attribute (build_meta.py)
    digest: str = ""             # content digest of the directory (or the project's sources)


@dataclass
class PassContext:
    project: Project
    target: TargetProfile
    backend: str
    precision: str
    workdir: Path                                   # scratch space, removed after the build
    log: Callable[[str], None] = lambda msg: None   # progress notes for the user
    history: dict[str, Artifact] = field(default_factory=dict)  # kind -> latest artifact of that kind


class PassConfig(Strict):
    """Base for pass configs: strict, frozen, JSON-serialisable (goes into the cache key)."""

    model_config = ConfigDict(strict=False)     # built in code (tuples for lists), not from TOML


class Pass:
    name: ClassVar[str]
    version: ClassVar[int]
    consumes: ClassVar[frozenset[str]]
    produces: ClassVar[str]
    Config: ClassVar[type[BaseModel]] = PassConfig

    def __init__(self, config: BaseModel | None = None):
        self.config = config if config is not None else self.Config()

    def target_facts(self, ctx: PassContext) -> Any:
        """The parts of the target this pass's output depends on. Default: none."""
        return None

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> BuildMeta | dict[str, Any]:
        """Write the output artifact into ``out_dir``; return its meta (a dict is validated
        into :class:`BuildMeta`)."""
        raise NotImplementedError


REGISTRY: dict[str, type[Pass]] = {}


def register(cls: type[Pass]) -> type[Pass]:
    for attr in ("name", "version", "consumes", "produces"):
        if not hasattr(cls, attr):
            raise TypeError(f"pass {cls.__name__} lacks '{attr}'")
    if cls.name in REGISTRY and REGISTRY[cls.name] is not cls:
        raise TypeError(f"pass name '{cls.name}' registered twice")
    REGISTRY[cls.name] = cls
    return cls
