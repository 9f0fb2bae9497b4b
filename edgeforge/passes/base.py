"""The pass protocol and registry.

A pass turns one artifact into another. It declares a name, a version (bump it to invalidate
cached outputs), the artifact kinds it consumes and the kind it produces, the other kinds it
reads (``needs``: an artifact made earlier in the chain, such as the float model verify compares
against), a typed config, and which parts of the target profile its output depends on (they go
into the cache key). The chain check (``pipeline.check_chain``) sees all of these before a pass
runs. A pass keeps no state between runs: what one run works out lives in that run.

:data:`REGISTRY` maps a pass's name to its class; the build plan (:mod:`edgeforge.plan`) names
passes and the registry resolves them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

from pydantic import BaseModel, ConfigDict

from ..build_meta import BuildMeta
from ..config import Strict
from ..errors import PassError
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
    # kind -> latest artifact of that kind: the pipeline's record, for its caller (api); a pass
    # never reads it, only ``inputs``
    history: dict[str, Artifact] = field(default_factory=dict)
    # the artifacts a pass declared in ``needs``, given by the pipeline to that step only
    inputs: dict[str, Artifact] = field(default_factory=dict)

    def needed(self, kind: str, step: str) -> Artifact:
        """The ``kind`` artifact this step declared in ``needs`` (the chain check made sure an
        earlier step produced it)."""
        art = self.inputs.get(kind)
        if art is None:
            raise PassError(step, f"reads a '{kind}' artifact it did not declare in its needs",
                            hint="declare it in the pass's needs: the chain check then sees it")
        return art


class PassConfig(Strict):
    """Base for pass configs: strict, frozen, JSON-serialisable (goes into the cache key)."""

    model_config = ConfigDict(strict=False)     # built in code (tuples for lists), not from TOML


class Pass:
    name: ClassVar[str]
    version: ClassVar[int]
    consumes: ClassVar[frozenset[str]]
    produces: ClassVar[str]
    needs: ClassVar[frozenset[str]] = frozenset()   # kinds read besides the input, made earlier in the chain
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
