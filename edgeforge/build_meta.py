"""What the passes hand each other (``Artifact.meta``), typed: :class:`BuildMeta` and the
models of its sections.

A pass writes these models and the next pass, the pipeline and the manifest writer read them by
attribute. Fields a pass measures on the host that built it (timings, the host's CPU flags) are
declared with :func:`measured`: the pipeline keeps them out of a step's content (its cache
entry and the next step's key) by walking the models (:func:`split_measured`), never by path
strings, and puts them back from the side record (:func:`merge_measured`) only where a model
declares a measured field. Unknown keys are kept (``extra="allow"``), so a section can grow.
"""
from __future__ import annotations

import copy
import types
import typing
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

_MEASURED = "measured"
_INTERNAL = "internal"


def measured(default: Any = None) -> Any:
    """A field holding a host measurement: outside the content digest, in a side record."""
    return Field(default, json_schema_extra={_MEASURED: True})


def internal(default: Any = None) -> Any:
    """A field the passes hand on that the manifest does not record as it is."""
    return Field(default, json_schema_extra={_INTERNAL: True})


def _flag(model: type[BaseModel], name: str, flag: str) -> bool:
    return bool((model.model_fields[name].json_schema_extra or {}).get(flag))


class Section(BaseModel):
    """A meta section: its named fields and sub-sections declared (leaf values kept exactly as
    the pass wrote them: a timing stays the number it was), others kept as written."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    def to_json(self) -> dict:
        return self.model_dump(mode="json", exclude_unset=True)


class SpeedRow(Section):
    """``accuracy_budget.speed[]``: one INT8 variant timed on the host."""
    variant: Any = None
    chosen: Any = None
    p50_ms: Any = measured()


class Attempt(Section):
    """``accuracy_budget.attempts[]``: one quantization tried by the budget's search."""
    algo: Any = None
    at_s: Any = measured()


class Cost(Section):
    """``accuracy_budget.cost``: what the float layers cost against plain INT8."""
    p50_ms: Any = measured()
    p50_ms_int8: Any = measured()


class AccuracyBudget(Section):
    met: Any = None
    final: Any = None
    final_drop: Any = None
    keep_float: Any = None
    arithmetic: Any = None
    seconds: Any = measured()
    attempts: list[Attempt] = []
    speed: list[SpeedRow] = []
    cost: Optional[Cost] = None
    op_sets: Any = None


class Scheme(Section):
    """``quantization.scheme``: the target's INT8 scheme and the CPU flag that chose it."""
    host_cpu_flags: Any = measured()


class Quantization(Section):
    algo: Any = None
    scheme: Optional[Scheme] = None
    arithmetic: Any = None
    pre_process: Any = None
    op_types: Any = None
    float_weights: Any = None
    fast_kl: Any = None
    degenerate_ranges: Any = None


class Verify(Section):
    status: Any = None
    reason: Any = None
    host_cpu_flags: Any = measured()


class Qat(Section):
    entered: Any = None
    shipped: Any = None
    why: Any = None
    seconds: Any = measured()
    host: Any = measured()


class Prune(Section):
    met: Any = None
    host: Any = measured()


class Nms(Section):
    where: Any = None
    postprocess: Any = None


class BuildMeta(BaseModel):
    """What the passes hand each other (``Artifact.meta``). Every field not marked
    :func:`internal` goes into the manifest as it is: a new manifest field is one line here
    (and the pass that sets it)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    file: str = internal("")                      # the artifact's file name in its directory
    precision: str = internal("fp32")
    num_eval_samples: Optional[int] = internal()  # -> manifest.reference.samples
    artifact_sha256: Optional[str] = internal()   # -> manifest.artifact.sha256 (recomputed)
    reference_images: list[str] = internal([])    # -> manifest.reference.images
    device_reference: Optional[dict[str, Any]] = internal()  # -> manifest.reference (passes/reference_data.py)
    float_file: Optional[str] = internal()        # -> manifest.float_artifact (an INT8 build's fp32 sibling)
    export: Optional[dict[str, Any]] = internal()     # the export's route and program (manifest.export)
    output_shapes: Optional[list[Any]] = internal()   # the exported program's outputs
    num_outputs: Optional[int] = internal()
    valid_targets: Optional[list[str]] = internal()   # convert.lite's --valid_targets

    float_size_bytes: Optional[int] = None        # the float artifact, for the size ratio
    verify: Verify = Verify()                     # verify's figures and status
    quantization: Optional[Quantization] = None   # calibration algo, scheme, fast paths
    keep_float: list[str] = []                    # layers kept in float
    accuracy_budget: Optional[AccuracyBudget] = None
    calibration_search: Optional[list[dict[str, Any]]] = None
    int8_vs_fp32: Optional[dict[str, Any]] = measured()   # host stand-in: both timed interleaved
    rewrites: list[dict[str, Any]] = []           # legalize rewrites and their op counts
    converter_fixes: list[dict[str, Any]] = []    # paddle2onnx input fixes (passes/legalize/pir_json.py)
    qat: Optional[Qat] = None                     # quantize.qat: entered, shipped, why, loss curve
    prune: Optional[Prune] = None                 # prune: FLOPs, size, host latency, metric before/after
    nms: Optional[Nms] = None                     # NMS out of the graph: {where: postprocess, postprocess}

    def manifest_fields(self) -> dict[str, Any]:
        """The manifest's fields from this meta, as JSON (sections as written, unset ones at
        their defaults)."""
        written = self.model_dump(mode="json", exclude_unset=True)
        return {name: written[name] if name in written else _json_default(f.default)
                for name, f in type(self).model_fields.items() if not _flag(type(self), name, _INTERNAL)}

    def updated(self, **fields: Any) -> BuildMeta:
        """A deep copy with ``fields`` set (validated: a section given as a dict becomes its model)."""
        copied = self.model_copy(deep=True)
        for name, value in fields.items():
            setattr(copied, name, value)
        return copied

    def carry(self, source: BuildMeta, *names: str) -> BuildMeta:
        """Copy the fields ``names`` that ``source`` set (a pass handing on what it did not make)."""
        for name in names:
            if name in source.model_fields_set:
                setattr(self, name, copy.deepcopy(getattr(source, name)))
        return self

    def to_json(self) -> dict:
        """Everything set, measured fields included."""
        return self.model_dump(mode="json", exclude_unset=True)


def _json_default(default: Any) -> Any:
    if isinstance(default, BaseModel):
        return default.model_dump(mode="json", exclude_unset=True)
    return copy.deepcopy(default)


def as_meta(meta: BuildMeta | dict | None) -> BuildMeta:
    """A pass's returned meta as :class:`BuildMeta` (a pass may return a plain dict)."""
    if isinstance(meta, BuildMeta):
        return meta
    return BuildMeta.model_validate(meta or {})


def _section(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """("one"|"list"|"dict", the model) when ``annotation`` holds a section model."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _section(arg)
            if found is not None:
                return found
        return None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "one", annotation
    if origin in (list, dict):
        inner = typing.get_args(annotation)[-1]
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            return origin.__name__, inner
    return None


def _items(shape: str, node: Any) -> list[tuple[Any, Any]]:
    if shape == "one":
        return [(None, node)]
    if shape == "list" and isinstance(node, list):
        return list(enumerate(node))
    if shape == "dict" and isinstance(node, dict):
        return list(node.items())
    return []


def _split(model: type[BaseModel], node: Any, at: list, out: list) -> None:
    if not isinstance(node, dict):
        return
    for name, f in model.model_fields.items():
        if name not in node:
            continue
        if _flag(model, name, _MEASURED):
            out.append([at + [name], node.pop(name)])
            continue
        found = _section(f.annotation)
        if found is not None:
            shape, sub = found
            for key, item in _items(shape, node[name]):
                _split(sub, item, at + [name] + ([] if key is None else [key]), out)


def split_measured(meta: BuildMeta | dict) -> tuple[dict, list]:
    """(the meta's content as a dict without its measured fields, [[path, value], ...]); the
    measured fields are those the models declare with :func:`measured`."""
    content = as_meta(meta).model_dump(exclude_unset=True) if isinstance(meta, BuildMeta) else copy.deepcopy(meta)
    pairs: list = []
    _split(BuildMeta, content, [], pairs)
    return content, pairs


def is_measured(path: Any, model: type[BaseModel] = BuildMeta) -> bool:
    """Whether ``path`` (keys and indices) ends at a field a model declares measured: a side
    record (from a remote cache, too) never reaches the rest of the meta."""
    if not isinstance(path, list) or not path:
        return False
    name, rest = path[0], path[1:]
    if not isinstance(name, str) or name not in model.model_fields:
        return False
    if _flag(model, name, _MEASURED):
        return not rest
    found = _section(model.model_fields[name].annotation)
    if found is None or not rest:
        return False
    shape, sub = found
    if shape == "one":
        return is_measured(rest, sub)
    key_ok = isinstance(rest[0], int) if shape == "list" else isinstance(rest[0], str)
    return key_ok and not isinstance(rest[0], bool) and is_measured(rest[1:], sub)


def merge_measured(content: dict, pairs: list) -> dict:
    """``content`` with the measured fields of :func:`split_measured` put back (only paths
    :func:`is_measured` accepts)."""
    meta = copy.deepcopy(content)
    for pair in pairs if isinstance(pairs, list) else []:
        if not (isinstance(pair, list) and len(pair) == 2 and is_measured(pair[0])):
            continue
        path, value = pair
        node: Any = meta
        try:
            for part in path[:-1]:
                node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
            node[path[-1]] = value
        except (IndexError, KeyError, TypeError):
            continue                        # a record that no longer fits its meta: dropped
    return meta
