"""The bench result: one versioned JSON file per run, ``edgeforge.bench/1``.

:class:`BenchResult` is the one definition, used to write a result (:func:`write_result`) and to
read one (:func:`read_result`, and ``edgeforge.report.load``). A file of another schema version
is refused (:class:`~edgeforge.errors.ResultError`); unknown extra keys are kept, so results can
grow. Files are written atomically and never replace an earlier result: a name that is taken
gets a ``-2``, ``-3``, ... suffix.

Top level: schema, status ("ok", or "incomplete" when the run failed part-way and this holds
what was measured before), created_at, edgeforge_version, artifact, build, device (name, host,
target, fingerprint), runtime, settings, samples_ms (raw, in run order), warmup_ms, summary,
drift, transfer, error (status "incomplete" only), end_to_end (bench --end-to-end only:
:class:`EndToEnd`; an optional section, so /1 readers that predate it keep reading results). ``runtime``, ``device.fingerprint`` and
``drift`` are open: the keys named here must be present (a value may be null), others may be.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from typing_extensions import Self

from ..errors import ResultError
from ..fsutil import dumps_json, json_safe, write_new_file
from ..oserror import os_error_text

SCHEMA = "edgeforge.bench/1"
STATUSES = ("ok", "incomplete")


class Open(BaseModel):
    """A section whose named keys are required (values may be null) and whose other keys stay."""

    model_config = ConfigDict(extra="allow")


# a number a report, compare or gate computes with: finite (no NaN, no Infinity), not true/false,
# and of a size a measurement can have (1e12 ms is 30 years; plots and statistics stay finite)
_BIG = 1e12
_NUM = Annotated[float, Field(strict=True, ge=-_BIG, le=_BIG, allow_inf_nan=False)]
_MS = Annotated[float, Field(strict=True, ge=0, le=_BIG, allow_inf_nan=False)]
_COUNT = Annotated[int, Field(strict=True, ge=0, le=2**53)]
_SHARE = Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)]
_NAME = Annotated[str, Field(max_length=512)]
NUM, MS, COUNT = _NUM, _MS, _COUNT          # for the other result documents (load)
SHA256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]   # a full lowercase hex digest


class ArtifactRef(Open):
    sha256: _NAME
    target: _NAME
    backend: _NAME
    precision: _NAME
    name: Optional[_NAME] = None
    size_bytes: Optional[_COUNT] = None
    float_size_bytes: Optional[_COUNT] = None


class Fingerprint(Open):
    cpu_model: Any
    kernel: Any
    governor: Any
    temp_c_before: Any
    temp_c_after: Any
    load_avg: Any


class DeviceRef(Open):
    name: _NAME
    fingerprint: Fingerprint


class Runtime(Open):
    name: Any
    version: Any


class Settings(Open):
    warmups: _COUNT
    runs: _COUNT
    threads: Any


class Summary(Open):
    """Times in ms and memory in MB: finite and not negative (a negative p50 passes no gate)."""
    p50_ms: Optional[_MS]
    p90_ms: Optional[_MS]
    p99_ms: Optional[_MS]
    mean_ms: Optional[_MS]
    mad_ms: Optional[_MS]
    peak_rss_mb: Optional[_MS]


class TaskDrift(Open):
    """``drift.task`` ([task] builds): names fixed, scripts read them."""
    kind: Optional[_NAME] = None
    metric: Optional[_NAME] = None
    float: Optional[_NUM] = None
    artifact: Optional[_NUM] = None
    drop: Optional[_NUM] = None


class Drift(Open):
    top1_agreement: Optional[_NUM]
    accuracy: Optional[_NUM]
    float_accuracy: Optional[_NUM]
    accuracy_drop: Optional[_NUM]
    max_abs_error: Optional[_NUM]
    cosine: Optional[_NUM]
    # [task] builds: {kind, metric, float, artifact, drop} (names fixed: scripts read them),
    # computed on the host from the device's evaluation outputs; absent/None otherwise
    task: Optional[TaskDrift] = None


class OpTime(Open):
    """One op type (``by_op``) or node (``by_node``) of a per-op profile: ms per run, its share."""
    op: _NAME
    ms: _MS
    share: _SHARE
    nodes: Optional[_COUNT] = None


class Profile(Open):
    """``profile`` (bench --profile): ``total_ms``, ``by_op`` and ``by_node``, or ``skipped``
    (why there is none)."""
    skipped: Optional[Annotated[str, Field(max_length=4096)]] = None
    total_ms: Optional[_MS] = None
    by_op: list[OpTime] = []
    by_node: list[OpTime] = []
    nodes: Optional[_COUNT] = None

    @model_validator(mode="after")
    def _whole(self) -> Profile:
        if not self.skipped and (self.total_ms is None or self.nodes is None):
            raise ValueError("a profile needs total_ms and nodes (or skipped: why there is none)")
        return self


E2E_STAGES = ("decode", "preprocess", "infer", "postprocess")


class StageFigures(Open):
    p50_ms: Optional[_MS]
    p99_ms: Optional[_MS]
    mean_ms: Optional[_MS]


class EndToEnd(Open):
    """``end_to_end`` (bench --end-to-end): each raw image through decode, pre-processing,
    inference (batch 1) and post-processing on the device. ``stages`` and ``total``: p50/p99/mean
    in ms; ``ai_tax``: the share of the time outside inference; ``samples_ms``: the raw
    per-stage samples, image by image."""
    images: int = Field(ge=1)
    runs: int = Field(ge=1)
    decoder: Literal["opencv", "pillow"]
    stages: dict[Literal["decode", "preprocess", "infer", "postprocess"], StageFigures]
    total: StageFigures
    ai_tax: Optional[float] = Field(ge=0, le=1)
    shares: dict[str, Optional[float]]
    samples_ms: dict[Literal["decode", "preprocess", "infer", "postprocess"], list[_MS]]

    @model_validator(mode="after")
    def _complete(self) -> EndToEnd:
        if set(self.stages) != set(E2E_STAGES) or set(self.samples_ms) != set(E2E_STAGES):
            raise ValueError(f"end_to_end needs every stage: {', '.join(E2E_STAGES)}")
        if any(len(v) != self.runs for v in self.samples_ms.values()):
            raise ValueError(f"end_to_end: {self.runs} runs, but not as many samples per stage")
        return self


class Transfer(Open):
    uploaded_bytes: Any
    seconds: Any


# edgeforge's own documents, by schema prefix: what each one is and which verbs read it (a
# document given to a verb that reads another kind is named, not called an unknown schema)
DOCUMENTS = {
    "edgeforge.bench/": ("a bench result", "edgeforge bench", "gate, compare, profile and report read it"),
    "edgeforge.load/": ("a load result", "edgeforge load",
                        "gate a load run as it runs (edgeforge load BUILD_DIR --device NAME "
                        "--min-throughput X --max-p99-ms Y); edgeforge report DIR shows it"),
    "edgeforge.deploy/": ("a deploy record", "edgeforge deploy/rollback",
                          "edgeforge releases NAME --device NAME lists what is deployed"),
    "edgeforge.build/": ("a build manifest", "edgeforge build",
                         "bench the build first: edgeforge bench BUILD_DIR --device NAME"),
    "edgeforge.decision/": ("a --precision auto decision", "edgeforge build/run --precision auto",
                            "it lies beside the chosen build's manifest.json; bench that build"),
    "edgeforge.report/": ("a report summary", "edgeforge report", "give the results it was made from"),
}


def document_kind(schema: Any) -> tuple[str, str, str] | None:
    """(what it is, what wrote it, what reads it) for one of edgeforge's own schema ids."""
    if isinstance(schema, str):
        for prefix, what in DOCUMENTS.items():
            if schema.startswith(prefix):
                return what
    return None


class Versioned(Open):
    """A versioned result document: ``schema`` must be exactly :attr:`SCHEMA` (another version is
    refused before anything else is read), unknown extra keys are kept. Subclasses set
    ``SCHEMA`` and ``KIND`` (how messages name the document)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    SCHEMA: ClassVar[str]
    KIND: ClassVar[str] = "result"
    NOUN: ClassVar[str | None] = None     # "bench result": what "not a ..." says (default KIND)

    schema_id: str = Field(alias="schema")

    @classmethod
    def check(cls, obj: Any, source: str | None = None) -> Self:
        """Parse ``obj`` (a decoded JSON document); ResultError naming the first problem."""
        source = source or cls.KIND
        noun = cls.NOUN or cls.KIND
        if not isinstance(obj, dict):
            raise ResultError(f"{source}: not a {noun} (a JSON object is expected)")
        schema = obj.get("schema")
        other = document_kind(schema)
        if schema != cls.SCHEMA and other is not None and not schema.startswith(cls.SCHEMA.split("/")[0] + "/"):
            what, writer, readers = other
            raise ResultError(f"{source}: {what} ({schema}, from {writer}), not a {noun}",
                              hint=readers)
        if schema != cls.SCHEMA:
            raise ResultError(f"{source}: unknown {cls.KIND} schema {schema!r}",
                              hint=f"an unknown schema is refused; this edgeforge reads {cls.SCHEMA}")
        try:
            return cls.model_validate(obj)
        except ValidationError as exc:
            raise ResultError(f"{source}: {_first_problem(exc)}") from None

    def to_json(self) -> dict:
        """The document to write: every key given (extras included)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class DeviceRunDoc(Versioned):
    """What every run on a device records, bench and load alike: whether it completed, the
    artifact it ran, the device and the runtime."""

    status: Literal["ok", "incomplete"]
    artifact: ArtifactRef
    device: DeviceRef
    runtime: Runtime
    runner_sha256: Optional[SHA256] = None      # the runner zipapp that ran (None: written before it shipped as one)


class Int8Rounds(Open):
    """``int8_vs_fp32``: the INT8 artifact and its build's fp32 sibling timed in interleaved
    rounds on the device (runner/bench.py); the INT8 verdict of bench and report is decided on
    them, so they are finite, non-negative and paired."""
    fp32_samples_ms: list[_MS] = Field(min_length=1, max_length=1_000_000)
    int8_samples_ms: list[_MS] = Field(min_length=1, max_length=1_000_000)

    @model_validator(mode="after")
    def _paired(self) -> Int8Rounds:
        if len(self.fp32_samples_ms) != len(self.int8_samples_ms):
            raise ValueError("fp32_samples_ms and int8_samples_ms must hold one sample per round each")
        return self


class BenchResult(DeviceRunDoc):
    """One bench run, as written and as read."""

    SCHEMA: ClassVar[str] = SCHEMA
    KIND: ClassVar[str] = "result"
    NOUN: ClassVar[str | None] = "bench result"

    settings: Settings
    samples_ms: list[Annotated[float, Field(strict=True, le=_BIG)]]   # numbers, not true/false or "1"
    summary: Summary
    drift: Drift
    transfer: Transfer
    end_to_end: Optional[EndToEnd] = None     # bench --end-to-end (an optional section of /1)
    profile: Optional[Profile] = None         # bench --profile (an optional section of /1)
    int8_vs_fp32: Optional[Int8Rounds] = None   # an INT8 bench with its fp32 sibling (optional in /1)

    @model_validator(mode="after")
    def _samples(self) -> BenchResult:
        if not all(math.isfinite(s) and s >= 0 for s in self.samples_ms):
            raise ValueError("samples_ms must hold finite, non-negative numbers")
        if self.status == "ok" and len(self.samples_ms) != self.settings.runs:
            raise ValueError(f"{len(self.samples_ms)} samples for {self.settings.runs} runs")
        return self


def _first_problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    if err["type"] == "missing":
        return f"missing '{where}'"
    if err["type"] == "literal_error" and where == "status":
        return f"status must be one of {', '.join(STATUSES)}, not {err.get('input')!r}"
    msg = err["msg"].removeprefix("Value error, ")
    return f"'{where}': {msg}" if where else msg


DRIFT_KEYS = tuple(Drift.model_fields) + ("mean_abs_error", "rel_max_abs_error")
FINGERPRINT_KEYS = tuple(Fingerprint.model_fields)


def empty_drift(reason: str | None = None) -> dict:
    d: dict = {k: None for k in DRIFT_KEYS}
    if reason:
        d["skipped"] = reason
    return d


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def validate(result: dict, source: str = "result") -> BenchResult:
    """A result dict parsed into :class:`BenchResult`, or ResultError naming the problem."""
    return BenchResult.check(result, source)


MAX_DOCUMENT = 256 << 20          # bytes: a result of a million samples is about 20 MB
MAX_DEPTH = 64                    # nesting: edgeforge's documents are 6 deep


def read_json(path: str | os.PathLike) -> Any:
    """A result file's JSON; ResultError when it is missing, too big, not JSON, or nested
    deeper than :data:`MAX_DEPTH` (never a RecursionError later)."""
    path = Path(path)
    try:
        if path.is_file() and path.stat().st_size > MAX_DOCUMENT:
            raise ResultError(f"{path}: {path.stat().st_size} bytes, more than any edgeforge document "
                              f"({MAX_DOCUMENT >> 20} MiB)")
        doc = json.loads(path.read_text(encoding="utf-8"))
        where = too_deep(doc)
        if where is not None:
            raise ResultError(f"{path}: '{where}': nested more than {MAX_DEPTH} levels deep")
        return doc
    except RecursionError:
        raise ResultError(f"{path}: nested more than {MAX_DEPTH} levels deep") from None
    except FileNotFoundError:
        raise ResultError(f"{path}: no such file or directory") from None
    except IsADirectoryError:
        raise ResultError(f"{path}: a directory, not a result file",
                          hint="name a result file (.json); report and gate also read a directory") from None
    except OSError as exc:
        raise ResultError(f"{path}: cannot be read ({os_error_text(exc, path)})") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ResultError(f"{path}: not valid JSON ({exc})") from None


def too_deep(doc: Any, limit: int = MAX_DEPTH) -> str | None:
    """The path of the first value nested deeper than ``limit`` in ``doc``, or None (iterative:
    any depth is measured without recursion)."""
    stack: list[tuple[Any, tuple]] = [(doc, ())]
    while stack:
        node, at = stack.pop()
        if len(at) > limit:
            return ".".join(str(p) for p in at[:8]) + "..."
        if isinstance(node, dict):
            stack.extend((v, at + (k,)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, at + (i,)) for i, v in enumerate(node))
    return None


def read_result(path: str | os.PathLike) -> BenchResult:
    """Read and parse one result file (any status) into its model."""
    return validate(read_json(path), str(path))


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def result_filename(result: dict) -> str:
    ts = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    a = result["artifact"]
    parts = [ts, result["device"]["name"], a.get("name") or "model", a["target"], a["backend"], a["precision"],
             a["sha256"][:8]]
    name = "-".join(slug(str(p)) for p in parts)
    if result.get("status") != "ok":
        name += "-incomplete"
    return name + ".json"


def write_result(results_dir: str | os.PathLike, result: dict) -> Path:
    """Write ``result`` under ``results_dir`` atomically; never overwrite an existing file."""
    result = json_safe(result)           # a NaN measured is written as null, as dumps_json does
    checked = BenchResult.check(result).to_json()
    doc = {k: checked[k] for k in result if k in checked}     # the caller's key order
    return write_document(results_dir, result_filename(doc), doc)


def write_document(results_dir: str | os.PathLike, name: str, doc: dict) -> Path:
    """Write ``doc`` as ``results_dir/name`` atomically; a name that is taken gets ``-2``,
    ``-3``, ...: an earlier result is never replaced. (Bench and load results.)"""
    d = Path(results_dir)
    final = write_new_file(d, name, dumps_json(doc))
    if final is None:
        raise ResultError(f"{d}: no free result file name for {name}")
    return final
