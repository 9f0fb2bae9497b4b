"""report.md: the report tables as Markdown."""
from __future__ import annotations

from .loadcurve import markdown_lines
from .tables import Cell, method_text, plain, report_tables


def render_markdown(summary: dict) -> str:
    fps, results = summary["fingerprints"], summary["results"]
    lines = ["# edgeforge benchmark report", "",
             f"Generated {summary['created_at']} by edgeforge {summary['edgeforge_version']} from "
             f"{len(results)} result(s) on {len(fps)} device fingerprint(s). Every row names the device, its "
             f"fingerprint (see *Devices*) and the artifact's sha256 (in full under *Artifacts*)."]
    for t in report_tables(summary):
        lines += ["", f"## {t.title}", ""] + [f"**{x}**  " for x in t.lead] + ([""] if t.lead else [])
        if not t.rows and t.empty:
            lines.append(t.empty)
            continue
        lines.append("| " + " | ".join(t.header) + " |")
        lines.append("|" + "|".join("---" for _ in t.header) + "|")
        lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in t.rows]
        if t.notes:
            lines += [""] + [f"- {n}" for n in t.notes]
    lines += markdown_lines(summary)          # load curves, when there are load results
    lines += ["", "## How to read the statistics", "", method_text(summary), ""]
    return "\n".join(lines)


def _cell(v) -> str:
    text = plain(v).replace("|", "\\|").replace("\n", " ")
    return f"`{text}`" if isinstance(v, Cell) and v.code else text
