"""report.md: the report tables as Markdown."""
from __future__ import annotations

from ..results.report_doc import ReportSummary
from .fmt import md_code, md_text
from .loadcurve import markdown_lines
from .tables import Cell, method_text, plain, report_tables


def render_markdown(summary: ReportSummary) -> str:
    fps, results = summary.fingerprints, summary.results
    lines = ["# edgeforge benchmark report", "",
             f"Generated {summary.created_at} by edgeforge {summary.edgeforge_version} from "
             f"{len(results)} result(s) on {len(fps)} device fingerprint(s). Every row names the device, its "
             f"fingerprint (see *Devices*) and the artifact's sha256 (in full under *Artifacts*)."]
    for t in report_tables(summary):
        lines += ["", f"## {t.title}", ""] + [f"**{md_text(x)}**  " for x in t.lead] + ([""] if t.lead else [])
        if not t.rows and t.empty:
            lines.append(md_text(t.empty))
            continue
        lines.append("| " + " | ".join(t.header) + " |")
        lines.append("|" + "|".join("---" for _ in t.header) + "|")
        lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in t.rows]
        if t.notes:
            lines += [""] + [f"- {md_text(n)}" for n in t.notes]
    lines += markdown_lines(summary)          # load curves, when there are load results
    lines += ["", "## How to read the statistics", "", method_text(summary), ""]
    return "\n".join(lines)


def _cell(v) -> str:
    """A table cell: a code cell as a code span, any other as escaped text (names in it are
    not edgeforge's: a device called ``<script>`` or ``a|b`` stays text in its column)."""
    return md_code(plain(v)) if isinstance(v, Cell) and v.code else md_text(plain(v))
