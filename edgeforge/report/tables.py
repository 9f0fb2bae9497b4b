"""The report's tables as data, once, for both renderers (Markdown and HTML).

A cell is plain text, or a :class:`Cell` that is shown as code and may carry a tooltip (the
full sha256 behind a short digest, the facts behind a fingerprint id).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..results.report_doc import Entry, EntryEndToEnd, Figure, FingerprintDoc, Pair, ReportSummary
from . import fmt
from .figure import SIGN_NOTE
from .verdict import why_not_significant

METHOD = (
    "Latency numbers (p50, p90, p99, mean, MAD) are the bench's summary of the raw samples of one run. "
    "An INT8/fp32 verdict comes from `edgeforge compare`: a two-sided Mann-Whitney U test on the medians of "
    "contiguous blocks of samples (blocks sized from each run's autocorrelation, so correlated samples are "
    "not counted as independent) with a percentile-bootstrap interval of the p50 ratio; a change is only "
    "called faster or slower when p < {alpha:g}, the interval excludes 1 and the p50 moved by at least "
    "{min_change:g}%. Results are paired and compared only on the same device fingerprint (CPU model, kernel, "
    "cores, governor). Each model is judged on its task's own metric (top-1 accuracy for a classifier, "
    "mAP for a detector, mIoU for a segmenter, CTC accuracy for a recogniser), measured on the host from "
    "the device's outputs (the drop's sign: see *What to ship*)."
)


@dataclass(frozen=True)
class Cell:
    text: str
    title: str | None = None
    code: bool = True


@dataclass
class Table:
    key: str                      # section id: devices, results, int8, artifacts, sources
    title: str
    header: list[str]
    rows: list[list] = field(default_factory=list)
    empty: str = ""               # what to say instead of an empty table
    notes: list[str] = field(default_factory=list)
    lead: list[str] = field(default_factory=list)   # lines before the table
    folded: bool = False          # details: folded under <details> in the HTML (all shown in Markdown)


def digest(sha256: str | None, prefix: str = "", short: bool = False) -> Cell | str:
    """The artifact's digest, 12 characters (``short``: only ``prefix``, the run id), the full
    sha256 as the tooltip."""
    if not sha256:
        return "-"
    return Cell(prefix.strip() if short and prefix else f"{prefix}{sha256[:12]}", title=f"sha256 {sha256}")


def fingerprint(fid: str, fingerprints: dict[str, FingerprintDoc]) -> Cell:
    f = fingerprints.get(fid)
    facts = "" if f is None else ", ".join(
        f"{k} {v}" for k, v in (("cpu_model", f.cpu_model), ("kernel", f.kernel), ("cores", f.cores),
                                ("governor", f.governor)) if k in f.model_fields_set)
    return Cell(fid, title=facts)


def device_cell(e: Entry, fingerprints: dict[str, FingerprintDoc], note: str = "") -> Cell:
    """The device and its fingerprint id, the fingerprint's facts as the tooltip."""
    fid = e.device.fingerprint_id
    return Cell(f"{e.device.name} {fid}{note}", title=fingerprint(fid, fingerprints).title, code=False)


def report_tables(summary: ReportSummary) -> list[Table]:
    fps, results, pairs = summary.fingerprints, summary.results, summary.int8_vs_float
    web = any(f.browser for f in fps.values())      # a browser device: its own column
    devices = Table("devices", "Devices", ["fingerprint", "device(s)", "CPU", "kernel", "cores", "governor"]
                    + (["browser"] if web else []) + ["runtime(s)"],
                    [[Cell(f.id), ", ".join(f.devices), f.cpu_model, f.kernel, f.cores,
                      f.governor] + ([f.browser or "-"] if web else []) + [", ".join(f.runtimes)]
                     for f in fps.values()], folded=True)
    runs = Table("results", "Latency and task metric",
                 ["run", "model/target/backend/precision", "artifact", "device", "p50 ms", "p99 ms", "metric",
                  "float", "artifact's", "drop (points)"])
    details = Table("details", "Run details", ["run", "fingerprint", "runtime", "threads", "samples", "p90 ms",
                                               "mean ms", "MAD ms", "peak RSS MB", "top-1 agreement", "cosine",
                                               "temp C", "load"], folded=True)
    for e in results:
        s, d = e.summary, e.drift
        emu = e.device.emulated
        runs.rows.append([e.id, e.label, digest(e.artifact.sha256),
                          device_cell(e, fps, f" (emulated, {emu}: timings are not figures)" if emu else ""),
                          fmt.ms(s.p50_ms), fmt.ms(s.p99_ms), *figure_cells(e.figure)])
        cosine = d.cosine if d else None
        details.rows.append([e.id, fingerprint(e.device.fingerprint_id, fps),
                             f"{e.runtime.name} {e.runtime.version}", e.settings.get("threads"),
                             e.n_samples, fmt.ms(s.p90_ms), fmt.ms(s.mean_ms), fmt.ms(s.mad_ms),
                             fmt.points(s.peak_rss_mb), fmt.pct(d.top1_agreement if d else None),
                             "-" if cosine is None else f"{cosine:.5f}",
                             fmt.temps(e.conditions.temp_c_before, e.conditions.temp_c_after),
                             fmt.load(e.conditions.load_avg)])
    int8 = Table("int8", "INT8 vs float",
                 ["model/target", "device", "fp32 run", "int8 run", "fp32 p50 ms", "int8 p50 ms",
                  "speed-up", "compare", "metric drop (points)", "size fp32/int8"],
                 empty="No INT8 results among the inputs.")
    for p in pairs:
        f, fig, c = p.float_, p.figure, p.compare
        int8.rows.append([f"{p.model or '?'}/{p.target}", p.device,
                          digest(f.sha256, f"{f.id} ", short=True) if f else "-",
                          digest(p.int8.sha256, f"{p.int8.id} ", short=True),
                          fmt.ms(f.p50_ms if f else None), fmt.ms(p.int8.p50_ms), fmt.ratio(p.speedup),
                          verdict_cell(p), f"{fmt.points(fig.drop)} ({fig.name})" if fig else "-",
                          fmt.ratio(p.size_ratio)])
        int8.notes.append(f"{p.int8.id}: {c.line if c else p.note}")
        int8.notes += [f"{p.int8.id} warning: {w}" for w in (c.warnings if c else [])]
    placement = runtime_table(results)
    profiles = Table("profile", "Per-op profiles", ["run", "model/target/backend/precision", "device",
                                                    "profiled ms", "top ops (share of time)", "quantize/dequantize"],
                     empty="No run carries a per-op profile (edgeforge bench --profile).")
    for e in results:
        pr = e.profile
        if pr:
            profiles.rows.append([e.id, e.label, e.device.name, fmt.ms(pr.total_ms),
                                  ", ".join(f"{o.op} {o.share * 100:.0f}%" for o in pr.by_op[:4]),
                                  f"{pr.qdq_share * 100:.1f}%"])
    e2e = end_to_end_table(results)
    artifacts = Table("artifacts", "Artifacts", ["sha256", "model/target/backend/precision", "size", "float model size"],
                      [[Cell(a.sha256), a.label, fmt.size(a.size_bytes), fmt.size(a.float_size_bytes)]
                       for a in summary.artifacts])
    sources = Table("sources", "Sources", ["run", "file", "result id", "created"],
                    [[e.id, Cell(e.source), e.result_id, e.created_at] for e in results],
                    notes=[f"skipped {s.source}: {s.reason}" for s in summary.skipped])
    for t in (placement, profiles, e2e, artifacts, sources):
        t.folded = True
    return [ship_table(summary), runs, int8, details, devices, placement, profiles, e2e, artifacts, sources]


def figure_cells(fig: Figure | None, short: bool = False) -> list[str]:
    """metric, float, artifact, drop: the task's own figure (report.figure) as table cells;
    ``short``: the metric's short name (a terminal column)."""
    if not fig:
        return ["-", "-", "-", "-"]
    value = (lambda v: fmt.num(v, ".4f")) if fig.metric.startswith("cosine") else fmt.pct
    name = fig.name.replace(" accuracy", "").replace(" vs float", "*") if short else fig.name
    return [name, value(fig.float_), value(fig.artifact), fmt.points(fig.drop)]


def ship_table(summary: ReportSummary) -> Table:
    """What to ship, per model, target and device, once: the latest INT8 verdict there, or what
    was measured where there is none. The first thing a person reads."""
    t = Table("ship", "What to ship", ["model/target", "device", "ship", "task metric", "why"],
              empty="No results among the inputs.")
    latest: dict[tuple, Entry] = {}
    for e in summary.results:
        latest[(e.model, e.artifact.target, e.device.name)] = e
    verdicts = {(p.model, p.target, p.device): p for p in summary.int8_vs_float}
    for key, e in latest.items():
        p = verdicts.get(key)
        v = p.verdict if p else None
        fig = (p.figure if p else None) or e.figure
        metric = "-" if not fig else (f"{fig.name} drop {fmt.points(fig.drop)} points"
                                      if fig.drop is not None else fig.name + " not measured")
        if v:
            ship = v.ship.upper() if v.ship == "int8" else "fp32"
            why = v.line + ("; --precision auto picks fp32" if v.ship == "fp32" else "")
        elif p:
            ship, why = "no verdict", p.note
        else:
            ship, why = e.artifact.precision, f"only {e.artifact.precision} measured here"
        t.rows.append([f"{key[0] or '?'}/{key[1]}", key[2], ship, metric, why])
    t.notes.append(SIGN_NOTE)
    return t


E2E_STAGES = ("decode", "preprocess", "infer", "postprocess")
E2E_MARKS = {"decode": "D", "preprocess": "P", "infer": "I", "postprocess": "O"}
BAR_WIDTH = 40


def stage(e2e: EntryEndToEnd, name: str, figure: str = "p50_ms") -> float | None:
    """One stage's figure (ms) of an end-to-end run, None when it has none."""
    s = e2e.stages.get(name)
    return getattr(s, figure) if s is not None else None


def text_bar(e2e: EntryEndToEnd, width: int = BAR_WIDTH) -> str:
    """The run's per-stage p50 as a stacked bar of letters (D decode, P pre-process, I infer, O
    post-process), about ``width`` letters for the sum (a stage that took any time gets one)."""
    p50 = [(st, stage(e2e, st) or 0.0) for st in E2E_STAGES]
    whole = sum(v for _, v in p50)
    if whole <= 0:
        return "-"
    cells = [max(1, round(v / whole * width)) if v > 0 else 0 for _, v in p50]     # every stage shows
    return "".join(E2E_MARKS[st] * n for (st, _), n in zip(p50, cells))


def end_to_end_table(results: list[Entry]) -> Table:
    """bench --end-to-end: per-stage p50/p99 (ms), the whole, the share outside the model."""
    t = Table("e2e", "End to end (decode, pre-process, infer, post-process)",
              ["run", "model/target/backend/precision", "device", "images", "decode p50/p99",
               "pre-process p50/p99", "infer p50/p99", "post-process p50/p99", "total p50/p99",
               "outside the model", "p50 by stage"],
              empty="No run carries end-to-end figures (edgeforge bench --end-to-end).")
    for e in results:
        x = e.end_to_end
        if not x:
            continue
        cells = [f"{fmt.ms(stage(x, st))} / {fmt.ms(stage(x, st, 'p99_ms'))}" for st in E2E_STAGES]
        emu = e.device.emulated
        t.rows.append([e.id, e.label, e.device.name + (f" (emulated, {emu})" if emu else ""),
                       x.images, *cells, f"{fmt.ms(x.total.p50_ms)} / {fmt.ms(x.total.p99_ms)}",
                       fmt.pct(x.ai_tax), Cell(text_bar(x))])
    if t.rows:
        t.notes.append("p50 by stage: D decode, P pre-process, I inference, O post-process, "
                       f"{BAR_WIDTH} letters for the sum of the stages' p50; outside the model: the "
                       "share of the summed time spent in decode, pre- and post-processing (the AI tax)")
    return t


def runtime_table(results: list[Entry]) -> Table:
    """Load time (first: the runtime builds its engine; warm: from its cache) and where the
    nodes ran (the target's first execution provider; a partial placement is a warning)."""
    t = Table("runtime", "Load time and placement", ["run", "device", "first load ms", "warm load ms",
                                                      "nodes on the first provider"],
              empty="No result records load time or placement (runner older than version 4).")
    for e in results:
        load, place = e.runtime.load, e.runtime.placement
        if not load and not place:
            continue
        t.rows.append([e.id, e.device.name, fmt.ms(load.first_ms if load else None),
                       fmt.ms(load.warm_ms if load else None),
                       place.summary.replace(" nodes on ", " on ") if place else "-"])
        if place and place.warning:
            t.notes.append(f"{e.id} warning: {place.warning}")
    return t


def method_text(summary: ReportSummary) -> str:
    st = summary.statistics
    return METHOD.format(alpha=st.alpha, min_change=st.min_change * 100)


def verdict_lines(pairs: list[Pair]) -> list[str]:
    """One line per model/target on a device with an INT8 verdict (the latest run's: repeated
    runs say it once): model/target on device, the verdict."""
    latest: dict[tuple, str] = {}
    for p in pairs:
        v = p.verdict
        if v:
            auto = "; --precision auto picks fp32" if v.ship == "fp32" else ""
            latest[(p.model, p.target, p.device)] = f"{p.model or '?'}/{p.target} on {p.device}: {v.line}{auto}"
    return list(latest.values())


def verdict_cell(pair: Pair) -> str:
    c = pair.compare
    if not c:
        return "not compared" if pair.float_ else "no fp32 run"
    if not c.significant:
        return f"not significant ({why_not_significant(c)})"
    return f"int8 {abs(c.change_pct):.1f}% {c.verdict} (p={c.p_value:.2g})"


def plain(v) -> str:
    if isinstance(v, Cell):
        return v.text
    return "-" if v is None or v == "" else str(v)
