"""The report summary (``summary.json``, ``edgeforge.report/1``): what ``edgeforge report`` writes
and both renderers (Markdown, HTML) and the plots read, as one model.

``report.report.build_summary`` makes it from the bench results; the renderers read it by
attribute; ``summary.json`` is its JSON (:meth:`ReportSummary.to_json`, the keys as before).
Sections keep keys they do not name (``extra="allow"``), so the summary can grow.
"""
from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from .schema import Drift, Summary

REPORT_SCHEMA = "edgeforge.report/1"


class _Doc(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Figure(_Doc):
    """The task's own figure (``report.figure.TaskFigure.to_dict``)."""
    kind: Optional[str] = None
    metric: str
    name: str
    float_: Optional[float] = Field(None, alias="float")
    artifact: Optional[float] = None
    drop: Optional[float] = None
    budget: Optional[str] = None


class EntryArtifact(_Doc):
    sha256: str
    short: str
    target: str
    backend: str
    precision: str
    size_bytes: Optional[int] = None


class EntryDevice(_Doc):
    name: str
    fingerprint_id: str
    emulated: Optional[str] = None          # e.g. qemu-user: timings are not figures


class Conditions(_Doc):
    temp_c_before: Any = None
    temp_c_after: Any = None
    load_avg: Any = None


class Placement(_Doc):
    summary: str
    warning: Optional[str] = None


class LoadTimes(_Doc):
    first_ms: Optional[float] = None
    warm_ms: Optional[float] = None


class EntryRuntime(_Doc):
    name: Any = None
    version: Any = None
    placement: Optional[Placement] = None
    load: Optional[LoadTimes] = None


class OpShare(_Doc):
    op: str
    share: float


class EntryProfile(_Doc):
    total_ms: float
    by_op: list[OpShare] = []
    qdq_share: float = 0.0


class StageP(_Doc):
    p50_ms: Optional[float] = None
    p99_ms: Optional[float] = None


class EntryEndToEnd(_Doc):
    images: Optional[int] = None
    stages: dict[str, Optional[StageP]] = {}
    total: StageP = StageP()
    ai_tax: Optional[float] = None


class Entry(_Doc):
    """One bench result in the report (R1, R2, ...)."""
    id: str
    source: str
    result_id: Any = None
    created_at: Optional[str] = None
    model: Optional[str] = None
    label: str
    artifact: EntryArtifact
    device: EntryDevice
    conditions: Conditions = Conditions()
    runtime: EntryRuntime = EntryRuntime()
    settings: dict[str, Any] = {}
    n_samples: int
    summary: Summary                         # the bench's; p50 from the samples when it had none
    drift: Optional[Drift] = None
    figure: Optional[Figure] = None
    transfer: Any = None
    profile: Optional[EntryProfile] = None
    end_to_end: Optional[EntryEndToEnd] = None


class PairSide(_Doc):
    id: str
    sha256: str
    p50_ms: float
    size_bytes: Optional[int] = None


class CompareDoc(_Doc):
    """``report.compare.Comparison.to_dict``: what compare said about fp32 vs INT8."""
    line: str
    significant: bool
    verdict: Optional[str] = None
    change_pct: Optional[float] = None
    p_value: Optional[float] = None
    warnings: list[str] = []


class VerdictDoc(_Doc):
    """``report.verdict.Verdict``: what to ship and the line that says why."""
    ship: str
    line: str


class Pair(_Doc):
    """An INT8 run with its fp32 counterpart (or why it has none) and what compare says."""
    model: Optional[str] = None
    target: str
    device: str
    fingerprint_id: str
    int8: PairSide
    float_: Optional[PairSide] = Field(None, alias="float")
    speedup: Optional[float] = None
    size_ratio: Optional[float] = None
    compare: Optional[CompareDoc] = None
    note: Optional[str] = None
    figure: Optional[Figure] = None
    accuracy_drop: Optional[float] = None
    cosine: Optional[float] = None
    verdict: Optional[VerdictDoc] = None
    interleaved: bool = False     # compare and speedup from the INT8 run's own rounds with its fp32 sibling


class FingerprintDoc(_Doc):
    """A stable device fingerprint, the devices and runtimes seen with it (other facts kept)."""
    id: str
    cpu_model: Any = None
    kernel: Any = None
    cores: Any = None
    governor: Any = None
    browser: Any = None
    devices: list[str] = []
    runtimes: list[str] = []


class ArtifactDoc(_Doc):
    sha256: str
    short: str
    label: str
    model: Optional[str] = None
    target: str
    backend: str
    precision: str
    size_bytes: Optional[int] = None
    float_size_bytes: Optional[int] = None


class Statistics(_Doc):
    test: str = ""
    interval: str = ""
    alpha: float
    min_change: float


class Skipped(_Doc):
    source: str
    reason: str


class Knee(_Doc):
    """One series' knee: the index of its level (None: throughput still grows)."""
    knee: Optional[int] = None
    sessions: Any = None
    threads: Any = None
    batch: Any = None


class Recommendation(_Doc):
    level: Optional[int] = None
    line: str = ""


class LoadAnalysis(_Doc):
    """A load result's ``analysis`` as far as it holds together (``report.loadcurve._analysis``)."""
    knees: list[Knee] = []
    slo_p99_ms: Optional[float] = None
    recommendation: Optional[Recommendation] = None
    knee_gain: float = 0.1


class LoadDevice(_Doc):
    name: str
    cpu_model: Any = None
    cores: Any = None
    emulated: Optional[str] = None


class LoadEntry(_Doc):
    """One load result in the report (L1, L2, ...): its levels' figures (raw samples left in the
    file), its knees and SLO pick. A level stays the mapping ``results.knee`` reads."""
    id: str
    source: str
    created_at: Optional[str] = None
    label: str
    artifact: EntryArtifact
    device: LoadDevice
    runtime: EntryRuntime = EntryRuntime()
    settings: dict[str, Any] = {}
    levels: list[dict[str, Any]] = []
    analysis: LoadAnalysis = LoadAnalysis()


class ReportSummary(_Doc):
    schema_: str = Field(REPORT_SCHEMA, alias="schema")
    created_at: str
    edgeforge_version: str
    statistics: Statistics
    fingerprints: dict[str, FingerprintDoc] = {}
    artifacts: list[ArtifactDoc] = []
    results: list[Entry] = []
    int8_vs_float: list[Pair] = []
    skipped: list[Skipped] = []
    load: list[LoadEntry] = []                # report.loadcurve.load_summary

    def to_json(self) -> dict:
        """``summary.json``: every key as built (extras included), by its JSON names."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)
