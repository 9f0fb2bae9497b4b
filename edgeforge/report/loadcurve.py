"""Load results in the report: the throughput-latency curve per artifact and device, the knee
marked, the SLO pick, beside the bench tables and plots.

:func:`split_load_paths` takes the ``edgeforge.load/1`` files out of what ``report`` was given
(a file named, or every one in a directory), so the bench loader sees bench results only;
:func:`load_summary` is what ``summary.json`` holds under ``load``; :func:`markdown_lines`,
:func:`html_parts` and :func:`curve_svg` render it.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from html import escape
from pathlib import Path

from ..errors import ResultError
from ..results.knee import describe, figures, load_point, measured
from ..results.load import is_load_document, read_load_result
from ..results.load import LoadResult
from ..results.report_doc import EntryArtifact, EntryRuntime, LoadDevice, LoadEntry, ReportSummary
from . import fmt
from .pairing import label, short

_FIGURE_KEYS = ("mode", "sessions", "threads", "batch", "concurrency", "rate", "completed", "errors", "unserved",
                "inferences_per_s", "samples_per_s", "p50_ms", "p90_ms", "p99_ms", "max_ms", "cpu_util_pct",
                "peak_rss_mb", "temp_c_before", "temp_c_after", "skipped")


def _json(path: Path):
    from ..errors import ResultError
    from ..results.schema import read_json

    try:
        return read_json(path)
    except ResultError:
        return None          # the bench loader reports it


def split_load_paths(paths, on_skip: Callable[[Path, str], None] | None = None):
    """(the paths for the bench loader, [(path, load result)]). A named load file must be a
    valid, complete one; in a directory, incomplete load runs are skipped (``on_skip``) and a
    directory that holds nothing but load results is not passed on."""
    paths, rest, loads = [Path(p) for p in paths], [], []
    for given in paths:
        if given.is_dir():
            other = False
            for f in sorted(given.rglob("*.json")):
                if any(part.startswith(".") for part in f.relative_to(given).parts):
                    continue
                obj = _json(f)
                if not is_load_document(obj):
                    other = True
                elif obj.get("status") != "ok":
                    if on_skip:
                        on_skip(f, f"an incomplete load run ({obj.get('error') or obj.get('status')})")
                else:
                    try:
                        loads.append((f, read_load_result(f)))
                    except ResultError as exc:          # one bad file does not sink the directory
                        if on_skip is None:
                            raise
                        on_skip(f, exc.one_line())
            if other:
                rest.append(given)
        elif given.is_file() and is_load_document(_json(given)):
            r = read_load_result(given)
            if r["status"] != "ok":
                raise ResultError(f"{given}: an incomplete load run ({r.get('error') or 'status incomplete'})",
                                  hint="only complete runs are reported")
            loads.append((given, r))
        else:
            rest.append(given)
    if not rest and not loads:
        rest = paths                 # nothing to report: the bench loader says why, in its words
    return rest, loads


def load_summary(loads: list[tuple[Path, dict]]) -> list[LoadEntry]:
    """One entry per load result: what it measured on what, its levels' figures (raw samples
    left in the result file), its knees and SLO pick."""
    out = []
    for i, (path, r) in enumerate(loads, 1):
        t = LoadResult.model_validate(r)
        a, fp, extra = t.artifact, t.device.fingerprint, t.model_extra or {}
        out.append(LoadEntry(
            id=f"L{i}", source=str(path), created_at=extra.get("created_at"), label=label(r),
            artifact=EntryArtifact(sha256=a.sha256, short=short(a.sha256), target=a.target, backend=a.backend,
                                   precision=a.precision),
            device=LoadDevice(name=t.device.name, cpu_model=fp.cpu_model, cores=(fp.model_extra or {}).get("cores"),
                              emulated=extra.get("emulated") or (fp.model_extra or {}).get("emulated")),
            runtime=EntryRuntime(name=t.runtime.name, version=t.runtime.version),
            settings=r["settings"],                      # as written (a level stays the mapping knee reads)
            levels=[{k: lv.get(k) for k in _FIGURE_KEYS} for lv in r["levels"]],
            analysis=_analysis(r)))
    return out


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _analysis(r: dict) -> dict:
    """The result's ``analysis`` as far as it holds together, for rendering: a file written by
    another version or by hand (an SLO left null, a knee or pick that is no measured level, a
    missing list) is reported with what it has, never a crash. A sound one comes back as it is."""
    a = r.get("analysis") if isinstance(r.get("analysis"), dict) else {}
    levels = r["levels"]

    def level(i):
        ok = isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(levels) and measured(levels[i])
        return i if ok else None

    knees = [dict(k, knee=level(k.get("knee"))) for k in a.get("knees") or [] if isinstance(k, dict)]
    slo = a.get("slo_p99_ms") if _real(a.get("slo_p99_ms")) and a["slo_p99_ms"] > 0 else None
    rec = a.get("recommendation")
    rec = dict(rec, level=level(rec.get("level")), line=str(rec.get("line") or "")) if isinstance(rec, dict) else None
    out = {**a, "knees": knees, "slo_p99_ms": slo, "recommendation": rec}
    if not _real(out.get("knee_gain", 0.1)):
        del out["knee_gain"]                   # a gain that is no number: the default (10 %)
    return out


def _title(e: LoadEntry) -> str:
    emu = f" - emulated ({e.device.emulated}): timings not meaningful" if e.device.emulated else ""
    return f"{e.id} {e.label} {e.artifact.short} on {e.device.name}{emu}"


def _marks(e: LoadEntry) -> tuple[set, int | None]:
    knees = {k.knee for k in e.analysis.knees if k.knee is not None}
    rec = e.analysis.recommendation
    return knees, rec.level if rec else None


def _rows(e: LoadEntry) -> list[list[str]]:
    knees, pick = _marks(e)
    rows = []
    for i, lv in enumerate(e.levels):
        if lv.get("skipped"):
            rows.append([f"{lv['sessions']}: {describe(lv)}", "skipped: " + lv["skipped"]] + [""] * 9)
            continue
        note = "SLO pick" if i == pick else "knee" if i in knees else ""
        rows.append([f"{lv['sessions']}: {describe(lv)}", fmt.num(lv.get("inferences_per_s"), ".0f"),
                     fmt.num(lv.get("samples_per_s"), ".0f"),
                     *[fmt.num(lv.get(k), ".3g") for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")],
                     str(lv.get("errors") or 0) + (f" (+{lv['unserved']} unserved)" if lv.get("unserved") else ""),
                     fmt.num(lv.get("cpu_util_pct"), ".0f"), fmt.num(lv.get("peak_rss_mb"), ".0f"), note])
    return rows


_HEADER = ["level", "inf/s", "samples/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors", "CPU %",
           "peak RSS MB", ""]


def _verdicts(e: LoadEntry) -> list[str]:
    out = []
    for k in e.analysis.knees:
        name = f"{k.sessions} session{'s' if k.sessions == 'own' else ''}, threads {k.threads}, batch {k.batch}"
        if k.knee is None:
            out.append(f"No knee ({name}): throughput still grows by 10% or more at the last level.")
        else:
            lv = e.levels[k.knee]
            out.append(f"Knee ({name}): {describe(lv)}: {figures(lv)}; beyond it throughput grows by less than "
                       f"{e.analysis.knee_gain * 100:.0f}% while p99 rises.")
    rec, slo = e.analysis.recommendation, e.analysis.slo_p99_ms
    if rec and rec.line:
        out.append(f"Recommended for p99 <= {slo:g} ms: `{rec.line}`." if slo is not None
                   else f"Recommended: `{rec.line}` (the result records no SLO).")
    if e.device.emulated:
        out.append(f"Emulated device ({e.device.emulated}): these timings are not performance figures.")
    return out


def markdown_lines(summary: ReportSummary) -> list[str]:
    if not summary.load:
        return []
    lines = ["", "## Load curves", ""]
    for e in summary.load:
        s = e.settings
        lines += [f"### {fmt.md_text(_title(e))}", "",
                  fmt.md_text(f"{e.runtime.name} {e.runtime.version} on {e.device.cpu_model}, "
                              f"{s['duration_s']:g} s per level after {s['warmup_s']:g} s of warm-up "
                              f"({s.get('mode', 'closed')} loop); from ") + f"{fmt.md_code(e.source)}.", "",
                  "| " + " | ".join(_HEADER) + " |", "|" + "|".join("---" for _ in _HEADER) + "|"]
        lines += ["| " + " | ".join(fmt.md_text(c) for c in row) + " |" for row in _rows(e)]
        lines += [""] + [f"- {fmt.md_text(v)}" for v in _verdicts(e)] + [""]
    return lines


def html_parts(summary: ReportSummary) -> list[str]:
    if not summary.load:
        return []
    parts = ['<h2 id="load">Load curves</h2>']
    for e in summary.load:
        parts.append(f"<h3>{escape(_title(e))}</h3>")
        svg = curve_svg(e)
        if svg:
            parts.append(f"<figure>{svg}<figcaption>Throughput against p99 latency, one line per series "
                         f"(sessions, threads, batch) in order of offered load; ring: the knee, star: the SLO "
                         f"pick.</figcaption></figure>")
        head = "".join(f"<th>{escape(h)}</th>" for h in _HEADER)
        parts.append(f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>')
        parts += ["<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in _rows(e)]
        parts.append("</tbody></table></div>")
        parts.append('<ul class="notes">' + "".join(f"<li>{escape(v)}</li>" for v in _verdicts(e)) + "</ul>")
    return parts


def curve_svg(e: LoadEntry) -> str | None:
    """Throughput (x) against p99 (y) for one load result; the knee ringed, the SLO pick starred,
    the SLO drawn as a dashed line."""
    from ..results.knee import series as series_of
    from .plots import figure, to_svg

    levels = e.levels
    groups = series_of(levels)
    if not groups:
        return None
    knees, pick = _marks(e)
    fig = figure(8.0, 3.6)
    ax = fig.subplots()
    for key, ix in groups.items():
        xs = [levels[i]["inferences_per_s"] for i in ix]
        ys = [levels[i]["p99_ms"] for i in ix]
        mode, sessions, threads, batch = key
        line, = ax.plot(xs, ys, marker="o", markersize=4, label=f"{sessions}, threads {threads}, batch {batch}")
        for i, x, y in zip(ix, xs, ys):
            lv = levels[i]
            ax.annotate(load_point(lv).replace(" req/s", "/s") if mode == "open" else f"K={lv['concurrency']}", (x, y),
                        textcoords="offset points", xytext=(4, 3), fontsize=7, color=line.get_color())
            if i in knees:
                ax.plot([x], [y], marker="o", markersize=13, markerfacecolor="none", markeredgewidth=1.5,
                        color=line.get_color())
                ax.annotate("knee", (x, y), textcoords="offset points", xytext=(-8, 10), fontsize=8,
                            fontweight="bold", color=line.get_color())
            if i == pick:
                ax.plot([x], [y], marker="*", markersize=14, color="black", linestyle="none")
    slo = e.analysis.slo_p99_ms
    if slo:
        ax.axhline(slo, linestyle="--", color="#888", linewidth=1)
        ax.annotate(f"SLO p99 {slo:g} ms", (1.0, slo), xycoords=("axes fraction", "data"), ha="right",
                    textcoords="offset points", xytext=(-3, 3), fontsize=7, color="#555")
    ys = [levels[i]["p99_ms"] for ix in groups.values() for i in ix]
    if min(ys) > 0 and max(ys) / min(ys) > 20:
        ax.set_yscale("log")
    ax.set_xlabel("throughput (inferences/s)")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_title(_title(e), loc="left", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return to_svg(fig, f"load{e.id}")

