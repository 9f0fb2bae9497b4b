"""The load result: one versioned JSON file per ``edgeforge load`` run, ``edgeforge.load/1``.

:class:`LoadResult` is the one definition, for writing (:func:`write_load_result`) and reading
(:func:`read_load_result`, the report). Another schema id, ``edgeforge.load/2`` included, is
refused (:class:`~edgeforge.errors.ResultError`); unknown extra keys are kept. Files are written
atomically and never replace an earlier one (``-2``, ``-3``, ... suffixes), like bench results.

Top level: schema, status ("ok", or "incomplete": the run failed part-way and ``levels`` holds
the ones measured before), created_at, edgeforge_version, artifact, build, device (name,
fingerprint: the bench layout, ``emulated`` where the device is), runtime, settings (duration_s,
warmup_s, the requested axes, timeouts), levels (one per point of the curve, see
:mod:`edgeforge.results.knee`), analysis (knees, SLO pick), transfer, timing, lease, error.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

from pydantic import Field, field_validator

from ..fsutil import json_safe
from .schema import COUNT, MS, NUM, DeviceRunDoc, Open, now_iso, read_json, slug, write_document

LOAD_SCHEMA = "edgeforge.load/1"


class Level(Open):
    """One point of the curve. ``skipped`` says why a requested level did not run."""

    mode: Literal["closed", "open"]
    sessions: Literal["shared", "own"]
    threads: Optional[COUNT]
    batch: int = Field(gt=0)
    concurrency: int = Field(gt=0)
    rate: Optional[MS] = None
    skipped: str | None = None
    completed: Optional[COUNT] = None
    errors: Optional[COUNT] = None
    inferences_per_s: float | None = None
    samples_per_s: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    cpu_util_pct: Optional[MS] = None
    peak_rss_mb: Optional[MS] = None
    temp_c_before: Optional[NUM] = None
    temp_c_after: Optional[NUM] = None
    samples_ms: list[MS] = Field(default_factory=list)

    @field_validator("inferences_per_s", "samples_per_s", "p50_ms", "p90_ms", "p99_ms", "max_ms")
    @classmethod
    def _finite(cls, v):
        if v is not None and not (math.isfinite(v) and v >= 0):
            raise ValueError("must be a finite number >= 0")
        return v


class LoadSettings(Open):
    duration_s: float = Field(gt=0, allow_inf_nan=False)
    warmup_s: float = Field(ge=0, allow_inf_nan=False)


class LoadResult(DeviceRunDoc):
    """One load run, as written and as read."""

    SCHEMA: ClassVar[str] = LOAD_SCHEMA
    KIND: ClassVar[str] = "load result"

    settings: LoadSettings
    levels: list[Level]
    analysis: dict


def is_load_document(obj: Any) -> bool:
    """Whether a decoded JSON document claims to be a load result (any version)."""
    return isinstance(obj, dict) and str(obj.get("schema", "")).startswith("edgeforge.load/")


def read_load_result(path: str | Path) -> dict:
    """Read and check one load result file (any status)."""
    obj = read_json(path)
    LoadResult.check(obj, str(path))
    return obj


def load_filename(result: dict) -> str:
    import datetime as _dt

    ts = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    a = result["artifact"]
    parts = [ts, result["device"]["name"], a.get("name") or "model", a["target"], a["backend"],
             a["precision"], a["sha256"][:8], "load"]
    name = "-".join(slug(str(p)) for p in parts)
    return name + ("" if result.get("status") == "ok" else "-incomplete") + ".json"


def write_load_result(results_dir: str | Path, result: dict) -> Path:
    """Write ``result`` under ``results_dir`` atomically; never overwrite an existing file."""
    result.setdefault("created_at", now_iso())
    LoadResult.check(json_safe(result))       # a NaN measured is written as null (dumps_json)
    return write_document(results_dir, load_filename(result), result)
