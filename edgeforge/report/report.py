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
from .int8_procedure import MIN_EFFECT, decide_results
from .pairing import fingerprint_id, float_counterpart, label, model_name, p50_ms, precision, short, stable_fingerprint
from .load import load_results
from .verdict import pair_verdict

REPORT_SCHEMA = "edgeforge.report/1"
# what each report file holds at its head, as edgeforge writes it (check_ours)
OURS = {"markdown": (b"# edgeforge benchmark report",), "html": (b"<title>edgeforge benchmark report</title>",),
        "summary_json": (b'"schema": "edgeforge.report/',)}
MARKDOWN, HTML, SUMMARY = "report.md", "report.html", "summary.json"
_FINGERPRINT_EXTRAS = ("arch", "os", "cpu_max_mhz", "mem_total_mb", "emulated")


def write_report(result_files: list[Path], out_dir: Path, *, chosen_by: str = "--out") -> dict:
    """Load ``result_files`` (files or directories), write the three report files into ``out_dir``
    (checked first by :func:`edgeforge.fsutil.writable_dir`; ``chosen_by`` names the flag).

    Returns ``{"markdown": path, "html": path, "summary_json": path, "summary": dict}``.
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
    summary = json_safe({**build_summary(loaded, skipped), "load": load_summary(loads)})
    out = writable_dir(out_dir, chosen_by, what="report directory")
    paths = {"markdown": out / MARKDOWN, "html": out / HTML, "summary_json": out / SUMMARY}
    for key, path in paths.items():         # an earlier report is replaced, a user's file never
        check_ours(path, chosen_by, OURS[key], "not an edgeforge report")
    files = {paths["markdown"]: render_markdown(summary), paths["html"]: render_html(summary, results),
             paths["summary_json"]: json.dumps(summary, indent=2, allow_nan=False) + "\n"}
    try:
        write_files_atomic(files)
    except OSError as exc:              # a full disk: the old report is as it was
        raise ConfigError(f"{chosen_by} {out}: cannot write the report ({exc.strerror or exc})",
                          hint="any report there before is as it was") from None
    return {**paths, "summary": summary}


def build_summary(loaded: list[tuple[Path, dict]], skipped: list[dict] | None = None) -> dict:
    """The report's content as data (what summary.json holds and both renderers read)."""
    results = [r for _, r in loaded]
    entries = [_entry(i, path, r) for i, (path, r) in enumerate(loaded, 1)]
    fingerprints: dict[str, dict] = {}
    for r in results:
        fid = fingerprint_id(r)
        fp = fingerprints.setdefault(fid, {"id": fid, **stable_fingerprint(r), **{
            k: r["device"]["fingerprint"][k] for k in _FINGERPRINT_EXTRAS if k in r["device"]["fingerprint"]},
            "devices": [], "runtimes": []})
        for key, value in (("devices", r["device"]["name"]), ("runtimes", f"{r['runtime']['name']} {r['runtime']['version']}")):
            if value not in fp[key]:
                fp[key].append(value)
    artifacts: dict[str, dict] = {}
    for r in results:
        a = r["artifact"]
        artifacts.setdefault(a["sha256"], {"sha256": a["sha256"], "short": short(a["sha256"]), "label": label(r),
                                           "model": model_name(r), "target": a["target"], "backend": a["backend"],
                                           "precision": a["precision"], "size_bytes": a.get("size_bytes"),
                                           "float_size_bytes": a.get("float_size_bytes") or r.get("float_size_bytes")})
    return {
        "schema": REPORT_SCHEMA,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "edgeforge_version": __version__,
        "statistics": {"test": "Mann-Whitney U, two-sided, on block medians", "interval": "percentile bootstrap",
                       "alpha": ALPHA, "min_change": MIN_CHANGE, "int8_min_effect": MIN_EFFECT},
        "fingerprints": fingerprints,
        "artifacts": list(artifacts.values()),
        "results": entries,
        "int8_vs_float": _pairs(results, entries),
        "skipped": list(skipped or []),      # files in the given directories that hold no complete run
    }


def _entry(index: int, path: Path, r: dict) -> dict:
    a, fp = r["artifact"], r["device"]["fingerprint"]
    s = dict(r["summary"])
    s["p50_ms"] = p50_ms(r)
    return {
        "id": f"R{index}",
        "source": str(path),
        "result_id": r.get("id"),
        "created_at": r.get("created_at"),
        "model": model_name(r),
        "label": label(r),
        "artifact": {"sha256": a["sha256"], "short": short(a["sha256"]), "target": a["target"],
                     "backend": a["backend"], "precision": a["precision"], "size_bytes": a.get("size_bytes")},
        "device": {"name": r["device"]["name"], "fingerprint_id": fingerprint_id(r),
                   "emulated": fp.get("emulated")},      # e.g. qemu-user: timings are not figures
        "conditions": {k: fp.get(k) for k in ("temp_c_before", "temp_c_after", "load_avg")},
        "runtime": {"name": r["runtime"]["name"], "version": r["runtime"]["version"],
                    "placement": r["runtime"].get("placement"), "load": r["runtime"].get("load")},
        "settings": r.get("settings") or {},
        "n_samples": len(r["samples_ms"]),
        "summary": s,
        "drift": r.get("drift"),
        "figure": _figure(r),          # the task's own metric (report.figure): what a person reads
        "transfer": r.get("transfer"),
        "profile": _profile(r),
        "end_to_end": _end_to_end(r),
    }


def _figure(r: dict) -> dict | None:
    from .figure import task_figure

    fig = task_figure(r.get("drift"))
    return fig.to_dict() if fig is not None else None


def _end_to_end(r: dict) -> dict | None:
    """The run's end-to-end figures (bench --end-to-end), without the raw samples."""
    e = r.get("end_to_end")
    if not e:
        return None
    return {k: e.get(k) for k in ("images", "runs", "decoder", "stages", "total", "ai_tax", "shares", "postprocess")}


def _profile(r: dict) -> dict | None:
    """The run's per-op profile (bench --profile), its op types only."""
    from .profile import qdq_share

    prof = r.get("profile")
    if not prof or prof.get("skipped"):
        return None
    return {"total_ms": prof["total_ms"], "by_op": prof["by_op"], "qdq_share": qdq_share(prof)}


def _pairs(results: list[dict], entries: list[dict]) -> list[dict]:
    """Each INT8 run with its fp32 counterpart (or why it has none) and what compare says."""
    out = []
    index = {id(r): e for r, e in zip(results, entries)}
    for r in results:
        if precision(r) != "int8":
            continue
        ref, why = float_counterpart(r, results)
        e = index[id(r)]
        drift = r.get("drift") or {}
        pair = {"model": model_name(r), "target": r["artifact"]["target"], "device": r["device"]["name"],
                "fingerprint_id": fingerprint_id(r),
                "int8": {"id": e["id"], "sha256": r["artifact"]["sha256"], "p50_ms": p50_ms(r),
                         "size_bytes": r["artifact"].get("size_bytes")},
                "float": None, "speedup": None, "size_ratio": None, "compare": None, "note": why,
                "figure": e["figure"],
                **{k: drift.get(k) for k in ("accuracy_drop", "accuracy", "float_accuracy", "top1_agreement", "cosine")}}
        if ref is not None:
            fe = index[id(ref)]
            pair["float"] = {"id": fe["id"], "sha256": ref["artifact"]["sha256"], "p50_ms": p50_ms(ref),
                             "size_bytes": ref["artifact"].get("size_bytes")}
            pair["speedup"] = p50_ms(ref) / p50_ms(r)
            sizes = (ref["artifact"].get("size_bytes"), r["artifact"].get("size_bytes"))
            if all(sizes):
                pair["size_ratio"] = sizes[0] / sizes[1]
            try:
                pair["compare"] = decide_results(ref, r, labels=(f"fp32 {fe['id']}", f"int8 {e['id']}")).to_dict()
            except ConfigError as exc:
                pair["note"] = f"not compared: {exc.one_line()}"
        v = pair_verdict(pair)
        pair["verdict"] = v.to_dict() if v else None
        out.append(pair)
    return out
