"""``edgeforge report``: bench results -> report.md, report.html (self-contained) and summary.json.

Every number in the report is tied to the device fingerprint it was measured on and the digest
of the artifact it measured. The three files are rendered in memory first, then written
atomically (see :func:`edgeforge.fsutil.write_files_atomic`).
"""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from .. import __version__
from ..errors import ConfigError
from ..fsutil import check_ours, json_safe, writable_dir, write_files_atomic
from .compare import ALPHA, MIN_CHANGE
from .int8_procedure import MIN_EFFECT, decide, decide_results, interleaved_samples
from .pairing import fingerprint_id, float_counterpart, label, model_name, p50_ms, precision, short, stable_fingerprint
from .load import load_results
from ..results.report_doc import (REPORT_SCHEMA, ArtifactDoc, CompareDoc, Conditions, Entry, EntryArtifact, EntryDevice,
                                  EntryRuntime, FingerprintDoc, Pair, PairSide, ReportSummary, Skipped,
                                  Statistics, VerdictDoc)
from ..results.schema import BenchResult, Summary
from .verdict import pair_verdict

# what each report file holds at its head, as edgeforge writes it (check_ours)
OURS = {"markdown": (b"# edgeforge benchmark report",), "html": (b"<title>edgeforge benchmark report</title>",),
        "summary_json": (b'"schema": "edgeforge.report/',)}
MARKDOWN, HTML, SUMMARY = "report.md", "report.html", "summary.json"
_FINGERPRINT_EXTRAS = ("arch", "os", "cpu_max_mhz", "mem_total_mb", "emulated")


def write_report(result_files: list[Path], out_dir: Path, *, chosen_by: str = "--out") -> dict:
    """Load ``result_files`` (files or directories), write the three report files into ``out_dir``
    (checked first by :func:`edgeforge.fsutil.writable_dir`; ``chosen_by`` names the flag).

    Returns ``{"markdown": path, "html": path, "summary_json": path, "summary": ReportSummary}``.
    """
    import json

    from .html import render_html
    from .loadcurve import load_summary, split_load_paths
    from .markdown import render_markdown

    skipped: list[dict] = []
    def on_skip(path, why):
        skipped.append({"source": str(path), "reason": why})
    bench_files, loads = split_load_paths(result_files, on_skip)    # edgeforge.load/1: the load curves
    loaded = load_results(bench_files, on_skip=on_skip) if bench_files or not loads else []
    results = [r for _, r in loaded]
    built = build_summary(loaded, skipped)
    built.load = load_summary(loads)
    doc = json_safe(built.to_json())                 # a NaN is written (and rendered) as null
    summary = ReportSummary.model_validate(doc)
    out = writable_dir(out_dir, chosen_by, what="report directory")
    paths = {"markdown": out / MARKDOWN, "html": out / HTML, "summary_json": out / SUMMARY}
    for key, path in paths.items():         # an earlier report is replaced, a user's file never
        check_ours(path, chosen_by, OURS[key], "not an edgeforge report")
    files = {paths["markdown"]: render_markdown(summary), paths["html"]: render_html(summary, results),
             paths["summary_json"]: json.dumps(doc, indent=2, allow_nan=False) + "\n"}
    try:
        write_files_atomic(files)
    except OSError as exc:              # a full disk: the old report is as it was
        raise ConfigError(f"{chosen_by} {out}: cannot write the report ({exc.strerror or exc})",
                          hint="any report there before is as it was") from None
    return {**paths, "summary": summary}


def build_summary(loaded: list[tuple[Path, dict]], skipped: list[dict] | None = None) -> ReportSummary:
    """The report's content (what summary.json holds and both renderers read), as its model."""
    results = [r for _, r in loaded]
    typed = [BenchResult.model_validate(r) for r in results]
    entries = [_entry(i, path, r, t) for i, ((path, r), t) in enumerate(zip(loaded, typed), 1)]
    fingerprints: dict[str, FingerprintDoc] = {}
    for r, t in zip(results, typed):
        fid, fp = fingerprint_id(r), t.device.fingerprint
        extras = {k: v for k, v in (fp.model_extra or {}).items() if k in _FINGERPRINT_EXTRAS}
        doc = fingerprints.setdefault(fid, FingerprintDoc(id=fid, **stable_fingerprint(r), **extras,
                                                                devices=[], runtimes=[]))
        runtime = f"{t.runtime.name} {t.runtime.version}"
        if t.device.name not in doc.devices:
            doc.devices.append(t.device.name)
        if runtime not in doc.runtimes:
            doc.runtimes.append(runtime)
    artifacts: dict[str, ArtifactDoc] = {}
    for r, t in zip(results, typed):
        a = t.artifact
        if a.sha256 not in artifacts:
            artifacts[a.sha256] = ArtifactDoc(
                sha256=a.sha256, short=short(a.sha256), label=label(r), model=model_name(r), target=a.target,
                backend=a.backend, precision=a.precision, size_bytes=a.size_bytes,
                float_size_bytes=a.float_size_bytes or (t.model_extra or {}).get("float_size_bytes"))
    return ReportSummary(
        schema=REPORT_SCHEMA, created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        edgeforge_version=__version__,
        statistics=Statistics(test="Mann-Whitney U, two-sided, on block medians", interval="percentile bootstrap",
                              alpha=ALPHA, min_change=MIN_CHANGE, int8_min_effect=MIN_EFFECT),
        fingerprints=fingerprints, artifacts=list(artifacts.values()), results=entries,
        int8_vs_float=_pairs(results, typed, entries),
        skipped=[Skipped(**s) for s in skipped or []])      # files in the given directories that hold no complete run


def _entry(index: int, path: Path, r: dict, t: BenchResult) -> Entry:
    a, fp, extra = t.artifact, t.device.fingerprint, t.model_extra or {}
    return Entry(
        id=f"R{index}", source=str(path), result_id=extra.get("id"), created_at=extra.get("created_at"),
        model=model_name(r), label=label(r),
        artifact=EntryArtifact(sha256=a.sha256, short=short(a.sha256), target=a.target, backend=a.backend,
                               precision=a.precision, size_bytes=a.size_bytes),
        device=EntryDevice(name=t.device.name, fingerprint_id=fingerprint_id(r),
                           emulated=(fp.model_extra or {}).get("emulated")),   # e.g. qemu-user: timings are not figures
        conditions=Conditions(temp_c_before=fp.temp_c_before, temp_c_after=fp.temp_c_after, load_avg=fp.load_avg),
        runtime=EntryRuntime(name=t.runtime.name, version=t.runtime.version,
                             placement=(t.runtime.model_extra or {}).get("placement"),
                             load=(t.runtime.model_extra or {}).get("load")),
        settings=t.settings.model_dump(mode="json", exclude_unset=True),
        n_samples=len(t.samples_ms),
        summary=Summary(**{**t.summary.model_dump(mode="json", exclude_unset=True), "p50_ms": p50_ms(r)}),
        drift=t.drift.model_dump(mode="json", exclude_unset=True),
        figure=_figure(r),          # the task's own metric (report.figure): what a person reads
        transfer=t.transfer.model_dump(mode="json", exclude_unset=True),
        profile=_profile(t), end_to_end=_end_to_end(t))


def _figure(r: dict) -> dict | None:
    from .figure import task_figure

    fig = task_figure(r.get("drift"))
    return fig.to_dict() if fig is not None else None


def _end_to_end(t: BenchResult) -> dict | None:
    """The run's end-to-end figures (bench --end-to-end), without the raw samples."""
    if not t.end_to_end:
        return None
    return t.end_to_end.model_dump(mode="json", exclude={"samples_ms"}, exclude_unset=True)


def _profile(t: BenchResult) -> dict | None:
    """The run's per-op profile (bench --profile), its op types only."""
    from .profile import qdq_share

    prof = t.profile
    if not prof or prof.skipped:
        return None
    return {"total_ms": prof.total_ms, "by_op": [o.model_dump(mode="json") for o in prof.by_op],
            "qdq_share": qdq_share(prof.model_dump(mode="json"))}


def _from_rounds(pair: Pair, r: dict, run_id: str) -> None:
    """An INT8 run timed in interleaved rounds with its build's fp32 sibling is judged on those
    rounds, as bench judged it (report/int8_procedure.py): a separate fp32 run, where there is
    one, stays in the row for its p50 and size, not for the verdict."""
    import statistics

    rounds = interleaved_samples(r)
    if rounds is None:
        return
    c = decide(rounds["fp32"], rounds["int8"], labels=("fp32 sibling", f"int8 {run_id}"))
    pair.compare = CompareDoc.model_validate(c.to_dict())
    pair.speedup = statistics.median(rounds["fp32"]) / statistics.median(rounds["int8"])
    pair.interleaved, pair.note = True, None


def _pairs(results: list[dict], typed: list[BenchResult], entries: list[Entry]) -> list[Pair]:
    """Each INT8 run with its fp32 counterpart (or why it has none) and what compare says."""
    out = []
    index = {id(r): (t, e) for r, t, e in zip(results, typed, entries)}
    for r in results:
        if precision(r) != "int8":
            continue
        ref, why = float_counterpart(r, results)
        t, e = index[id(r)]
        drift = t.drift
        pair = Pair(model=model_name(r), target=t.artifact.target, device=t.device.name,
                    fingerprint_id=fingerprint_id(r),
                    int8=PairSide(id=e.id, sha256=t.artifact.sha256, p50_ms=p50_ms(r), size_bytes=t.artifact.size_bytes),
                    float=None, speedup=None, size_ratio=None, compare=None, note=why, figure=e.figure,
                    accuracy_drop=drift.accuracy_drop, accuracy=drift.accuracy, float_accuracy=drift.float_accuracy,
                    top1_agreement=drift.top1_agreement, cosine=drift.cosine)
        if ref is not None:
            rt, fe = index[id(ref)]
            pair.float_ = PairSide(id=fe.id, sha256=rt.artifact.sha256, p50_ms=p50_ms(ref),
                                   size_bytes=rt.artifact.size_bytes)
            pair.speedup = p50_ms(ref) / p50_ms(r)
            if rt.artifact.size_bytes and t.artifact.size_bytes:
                pair.size_ratio = rt.artifact.size_bytes / t.artifact.size_bytes
            try:
                pair.compare = CompareDoc.model_validate(
                    decide_results(ref, r, labels=(f"fp32 {fe.id}", f"int8 {e.id}")).to_dict())
            except ConfigError as exc:
                pair.note = f"not compared: {exc.one_line()}"
        _from_rounds(pair, r, e.id)
        v = pair_verdict(pair)
        pair.verdict = VerdictDoc.model_validate(v.to_dict()) if v else None
        out.append(pair)
    return out
