"""report.html: one self-contained page (inline CSS and SVG; no scripts, fonts or links to fetch)."""
from __future__ import annotations

from html import escape

from ..results.report_doc import ReportSummary
from . import plots
from .loadcurve import html_parts
from .tables import Cell, method_text, plain, report_tables

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:24px auto;max-width:1240px;
color:#222;padding:0 16px}
h1{font-size:1.5em;margin-bottom:4px}h2{font-size:1.15em;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:3px}
p.meta{color:#555;margin-top:0}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:12.5px;margin:8px 0;max-width:100%}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top;overflow-wrap:anywhere}
td code{white-space:nowrap}
details{margin:10px 0}summary{font-weight:600;cursor:pointer}
table#ship-table td:nth-child(3){font-weight:700}
th{background:#f4f4f4}tr:nth-child(even) td{background:#fafafa}
code{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12px}
code[title]{text-decoration:underline dotted;cursor:help}
figure{margin:12px 0}figure svg{max-width:100%;height:auto}
figcaption{color:#555;font-size:12px}
ul.notes{font-size:12.5px;color:#333}
"""

_FIGURES = {  # table key -> (figure, caption)
    "results": (plots.latency_distributions, "Latency distribution of every run's raw samples, per device fingerprint."),
    "int8": (plots.int8_vs_float, "INT8 against fp32 on the same device: p50 with the p10-p90 range, and accuracy drop."),
    "profile": (plots.op_profiles, "Per-op profile of each profiled run: the share of its time per op type."),
    "artifacts": (plots.artifact_sizes, "Artifact sizes (pale: the float model the INT8 artifact came from)."),
    "e2e": (plots.end_to_end_stages, "End to end per run: each stage's p50 per image, stacked (decode, "
                                     "pre-process, inference, post-process)."),
}


def render_html(summary: ReportSummary, results: list[dict]) -> str:
    fps = summary.fingerprints
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>edgeforge benchmark report</title>", f"<style>{_CSS}</style></head><body>",
             "<h1>edgeforge benchmark report</h1>",
             f'<p class="meta">Generated {escape(summary.created_at)} by edgeforge '
             f'{escape(summary.edgeforge_version)} from {len(summary.results)} result(s) on {len(fps)} device '
             f"fingerprint(s). Every row names the device, its fingerprint and the artifact digest; hover a digest "
             f"or fingerprint for the full value.</p>"]
    for t in report_tables(summary):
        parts += _section(t, summary, results)
    parts += html_parts(summary)              # load curves, when there are load results
    parts += ['<h2 id="method">How to read the statistics</h2>', f"<p>{escape(method_text(summary))}</p>",
              "</body></html>", ""]
    return "\n".join(parts)


def _section(t, summary: ReportSummary, results: list[dict]) -> list[str]:
    """One table with its notes and figure: a heading, or folded under <details>."""
    out = ([f'<details id="{t.key}"><summary>{escape(t.title)}</summary>'] if t.folded
           else [f'<h2 id="{t.key}">{escape(t.title)}</h2>'])
    out += [f'<p class="verdict"><b>{escape(x)}</b></p>' for x in t.lead]
    if not t.rows and t.empty:
        out.append(f"<p>{escape(t.empty)}</p>")
    else:
        out.append(f'<div class="scroll"><table id="{t.key}-table"><thead><tr>'
                   + "".join(f"<th>{escape(h)}</th>" for h in t.header) + "</tr></thead><tbody>")
        out += ["<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in t.rows]
        out.append("</tbody></table></div>")
    if t.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in t.notes) + "</ul>")
    if t.key in _FIGURES and t.rows:
        draw, caption = _FIGURES[t.key]
        svg = draw(summary, results) if t.key not in ("artifacts", "profile", "e2e") else draw(summary)
        if svg:
            out.append(f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>")
    return out + (["</details>"] if t.folded else [])


def _cell(v) -> str:
    text = escape(plain(v))
    if isinstance(v, Cell):
        title = f' title="{escape(v.title)}"' if v.title else ""
        return f"<code{title}>{text}</code>" if v.code else f"<span{title}>{text}</span>"
    return text
