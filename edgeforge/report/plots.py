"""The report's figures, drawn with matplotlib (object API, no pyplot, no GUI backend) as inline SVG.

Each function takes the report summary (and the raw results where it needs samples) and
returns an ``<svg>`` element as a string, or None when there is nothing to draw. Text stays
text (svg.fonttype none) so labels are searchable; element ids are prefixed per figure so several
figures can live in one HTML page.
"""
from __future__ import annotations

import io
import re

import numpy as np

from ..results.report_doc import ReportSummary
from .tables import stage

PRECISION_COLORS = {"fp32": "#4C72B0", "fp16": "#55A868", "int8": "#DD8452"}
OTHER_COLOR = "#8172B3"
FLOAT_GHOST = "#d9d9d9"
_RC = {"svg.fonttype": "none", "svg.hashsalt": "edgeforge", "font.size": 9,
       "font.family": ["DejaVu Sans", "Liberation Sans", "Arial", "sans-serif"]}


def to_svg(fig, prefix: str) -> str:
    """The figure as an ``<svg>`` element: no XML prolog, ids made unique with ``prefix``."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context(_RC):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    text = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', text)
    text = re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', text)
    return re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", text)


def figure(width: float, height: float):
    from matplotlib.figure import Figure

    import matplotlib

    with matplotlib.rc_context(_RC):
        return Figure(figsize=(width, height), layout="constrained")


def _color(precision: str) -> str:
    return PRECISION_COLORS.get(precision, OTHER_COLOR)


def _legend(ax, precisions, extra: dict[str, str] | None = None) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(color=_color(p), label=p) for p in dict.fromkeys(precisions)]
    handles += [Patch(color=color, label=name) for name, color in (extra or {}).items()]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def _samples(r: dict) -> np.ndarray:
    """A bench result's raw samples (ms)."""
    return np.asarray(r["samples_ms"])


def latency_distributions(summary: ReportSummary, results: list[dict]) -> str | None:
    """Box plots of every run's raw samples, one panel per device fingerprint."""
    entries = summary.results
    groups: dict[tuple[str, str], list[int]] = {}
    for i, e in enumerate(entries):
        groups.setdefault((e.device.name, e.device.fingerprint_id), []).append(i)
    heights = [max(1.2, 0.42 * len(ix) + 0.6) for ix in groups.values()]
    fig = figure(11.0, sum(heights) + 0.3)
    axes = fig.subplots(len(groups), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, ((device, fid), ix) in zip(axes, groups.items()):
        data = [_samples(results[i]) for i in ix]
        labels = [f"{entries[i].id} {entries[i].label}  {entries[i].artifact.short}" for i in ix]
        box = ax.boxplot(data, orientation="horizontal", whis=(1, 99), widths=0.6, patch_artist=True,
                         medianprops={"color": "black"}, flierprops={"markersize": 2, "alpha": 0.5})
        for patch, i in zip(box["boxes"], ix):
            patch.set_facecolor(_color(entries[i].artifact.precision))
            patch.set_alpha(0.75)
        ax.set_yticks(range(1, len(ix) + 1), labels)
        ax.invert_yaxis()
        lo, hi = min(d.min() for d in data), max(d.max() for d in data)
        if hi / lo > 8:
            ax.set_xscale("log")
        ax.set_xlabel("latency per inference (ms); box: quartiles, whiskers: p1-p99, dots: outliers")
        fp = summary.fingerprints[fid]
        ax.set_title(f"{device} · {fid} · {fp.cpu_model} · kernel {fp.kernel}", loc="left", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        _legend(ax, [entries[i].artifact.precision for i in ix])
    return to_svg(fig, "lat")


def int8_vs_float(summary: ReportSummary, results: list[dict]) -> str | None:
    """Per INT8/fp32 pair: p50 with p10-p90 range for each precision, and the accuracy drop."""
    pairs = [p for p in summary.int8_vs_float if p.float_]
    if not pairs:
        return None
    by_id = {e.id: _samples(r) for e, r in zip(summary.results, results)}
    fig = figure(11.0, 0.75 * len(pairs) + 1.4)
    ax_lat, ax_acc = fig.subplots(1, 2, width_ratios=[3, 1.3], sharey=True)
    names = [f"{p.model}/{p.target}\n{p.device} · {p.fingerprint_id}" for p in pairs]
    y = np.arange(len(pairs))
    for offset, prec in ((-0.17, "fp32"), (0.17, "int8")):
        for yi, p in zip(y, pairs):
            side = p.float_ if prec == "fp32" else p.int8
            lo, mid, hi = np.percentile(by_id[side.id], [10, 50, 90])
            ax_lat.errorbar(mid, yi + offset, xerr=[[mid - lo], [hi - mid]], fmt="o", color=_color(prec),
                            capsize=3, label=prec if yi == 0 else None)
    for yi, p in zip(y, pairs):
        right = np.percentile(by_id[p.float_.id], 90)
        ax_lat.annotate(f"{p.speedup:.2f}x", (right, yi - 0.17), textcoords="offset points",
                        xytext=(6, -3), fontsize=8)
    p50s = [side.p50_ms for p in pairs for side in (p.float_, p.int8)]
    if max(p50s) / min(p50s) > 8:
        ax_lat.set_xscale("log")
    ax_lat.set_yticks(y, names)
    ax_lat.invert_yaxis()
    ax_lat.set_xlabel("latency (ms): p50 with p10-p90; label: speed-up fp32/int8")
    ax_lat.legend(fontsize=8, frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2)
    ax_lat.grid(axis="x", alpha=0.3)
    drops = [p.accuracy_drop for p in pairs]
    ax_acc.barh(y, [d or 0.0 for d in drops], color=_color("int8"), alpha=0.8, height=0.5)
    for yi, d in zip(y, drops):
        ax_acc.annotate("n/a" if d is None else f"{d:.2f}", (d or 0.0, yi), textcoords="offset points",
                        xytext=(3, -3), fontsize=8)
    ax_acc.set_xlabel("int8 accuracy drop (points)")
    ax_acc.grid(axis="x", alpha=0.3)
    known = [d for d in drops if d is not None]
    ax_acc.set_xlim(min(known + [0.0]) * 1.35, max(known + [0.5]) * 1.35)
    return to_svg(fig, "i8f")


def artifact_sizes(summary: ReportSummary) -> str | None:
    """Artifact size per distinct artifact; a pale bar shows the float model's size where known."""
    arts = [a for a in summary.artifacts if a.size_bytes]
    if not arts:
        return None
    fig = figure(11.0, 0.38 * len(arts) + 0.9)
    ax = fig.subplots()
    y = np.arange(len(arts))
    floats = [a.float_size_bytes for a in arts]
    if any(floats):
        ax.barh(y, [(f or 0) / 1024 for f in floats], color=FLOAT_GHOST, height=0.6)
    ax.barh(y, [a.size_bytes / 1024 for a in arts], height=0.6,
            color=[_color(a.precision) for a in arts])
    for yi, a in zip(y, arts):
        ax.annotate(f"{a.size_bytes / 1024:.1f} KB", (a.size_bytes / 1024, yi), textcoords="offset points",
                    xytext=(3, -3), fontsize=8)
    ax.set_yticks(y, [f"{a.label}  {a.short}" for a in arts])
    ax.invert_yaxis()
    ax.set_xlabel("artifact size (KB)")
    ax.grid(axis="x", alpha=0.3)
    _legend(ax, [a.precision for a in arts], {"float model": FLOAT_GHOST} if any(floats) else None)
    return to_svg(fig, "size")


def _stacked(runs: list):
    """A figure for one horizontal stacked bar per run: (fig, ax, bar positions, zero lefts)."""
    fig = figure(9.0, 0.5 * len(runs) + 1.3)
    return fig, fig.subplots(), np.arange(len(runs)), np.zeros(len(runs))


def op_profiles(summary: ReportSummary) -> str | None:
    """Per profiled run: a stacked bar of its time by op type (the five largest overall, the
    rest as "other"), labelled with the profiled total."""
    runs = [e for e in summary.results if e.profile]
    if not runs:
        return None
    weight: dict[str, float] = {}
    for e in runs:
        for o in e.profile.by_op:
            weight[o.op] = weight.get(o.op, 0.0) + o.share
    top = sorted(weight, key=lambda op: -weight[op])[:5]
    fig, ax, y, left = _stacked(runs)
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", FLOAT_GHOST]
    for op, color in zip(top + ["other"], colors):
        share = np.array([sum(o.share for o in e.profile.by_op
                              if (o.op == op) or (op == "other" and o.op not in top)) for e in runs])
        ax.barh(y, share * 100, left=left, color=color, height=0.6, label=op)
        left += share * 100
    for yi, e in zip(y, runs):
        ax.annotate(f"{e.profile.total_ms:.3g} ms", (100, yi), textcoords="offset points",
                    xytext=(4, -3), fontsize=8)
    ax.set_yticks(y, [f"{e.id} {e.label}" for e in runs])
    ax.invert_yaxis()
    ax.set_xlim(0, 112)
    ax.set_xlabel("share of profiled time (%)")
    ax.legend(fontsize=8, frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=6)
    return to_svg(fig, "opp")


E2E_COLORS = {"decode": "#8172B3", "preprocess": "#55A868", "infer": "#4C72B0", "postprocess": "#DD8452"}


def end_to_end_stages(summary: ReportSummary) -> str | None:
    """Per run of bench --end-to-end: a stacked bar of its per-stage p50 (decode, pre-process,
    infer, post-process), labelled with the total p50/p99 and the share outside the model."""
    runs = [e for e in summary.results if e.end_to_end]
    if not runs:
        return None
    fig, ax, y, left = _stacked(runs)
    for st, color in E2E_COLORS.items():
        v = np.array([stage(e.end_to_end, st) or 0.0 for e in runs])
        ax.barh(y, v, left=left, color=color, height=0.6, label=st)
        left += v
    for yi, e, right in zip(y, runs, left):
        x = e.end_to_end
        tax = "" if x.ai_tax is None else f", {x.ai_tax * 100:.0f}% outside the model"
        ax.annotate(f"total p50 {x.total.p50_ms:.3g} / p99 {x.total.p99_ms:.3g} ms{tax}",
                    (right, yi), textcoords="offset points", xytext=(4, -3), fontsize=8)
    ax.set_yticks(y, [f"{e.id} {e.label}" for e in runs])
    ax.invert_yaxis()
    ax.set_xlim(0, float(left.max()) * 1.6 if left.max() > 0 else 1.0)
    ax.set_xlabel("per-stage p50 (ms), stacked")
    ax.legend(fontsize=8, frameon=False, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=4)
    return to_svg(fig, "e2e")
