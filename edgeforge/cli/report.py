"""The report verbs: ``report``, ``compare``, ``gate``.

Thin parsers over :mod:`edgeforge.report`; nothing heavy (scipy, matplotlib) is imported
until a verb runs.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError, ExitCode
from ._common import add_gate_arguments, console, escape, gate_verdict, gates_requested, number
from ._width import clause_wrap, drop_to_fit


def register(sub) -> None:
    r = sub.add_parser("report", help="render bench results as report.md, report.html and summary.json")
    r.add_argument("results", nargs="+", metavar="RESULTS", help="result files, or directories of *.json")
    r.add_argument("--out", default="report", metavar="DIR", help="output directory (default: ./report)")
    r.set_defaults(func=cmd_report)

    c = sub.add_parser("compare", help="is run B faster or slower than run A, or is it noise?")
    c.add_argument("a", metavar="A.json", help="the baseline run")
    c.add_argument("b", metavar="B.json", help="the run to judge against A")
    c.add_argument("--force", action="store_true",
                   help="compare runs from different device fingerprints or runtimes anyway")
    c.add_argument("--alpha", type=number(float, "a significance level", at_most=0.5), metavar="P",
                   help="significance level (default 0.05)")
    c.add_argument("--min-change", type=number(float, "percent", allow_zero=True, at_most=1000), metavar="PERCENT",
                   help="smallest p50 change called significant (default 1)")
    c.add_argument("--json", action="store_true", help="print the comparison as JSON")
    c.set_defaults(func=cmd_compare)

    g = sub.add_parser("gate", help="check results against quality gates; exit 1 if one fails")
    g.add_argument("results", nargs="+", metavar="RESULTS", help="result files, or directories of *.json")
    add_gate_arguments(g)
    g.set_defaults(func=cmd_gate)


# ---------------------------------------------------------------- verbs

def _say_skipped(path, why: str) -> None:
    console(stderr=True).print(f"skipped {path}: {why}", style="yellow", markup=False)


def cmd_gate(args) -> int:
    from ..report.load import load_results

    if not gates_requested(args):
        raise ConfigError("no gate given: pass --gate-accuracy-drop, --max-metric-drop, --max-p50-ms "
                          "or --min-int8-speedup")
    failure = gate_verdict(args, [r for _, r in load_results(args.results, on_skip=_say_skipped)])
    if failure is not None:
        raise failure
    return ExitCode.OK


def cmd_compare(args) -> int:
    import json

    from ..report.compare import ALPHA, MIN_CHANGE, compare
    from ..report.figure import figures_of_pair
    from ..report.pairing import fingerprint_id, label, short
    from ..report.load import load_result

    a, b = load_result(args.a), load_result(args.b)
    min_change = MIN_CHANGE if args.min_change is None else args.min_change / 100.0
    res = compare(a, b, force=args.force, alpha=ALPHA if args.alpha is None else args.alpha,
                  min_change=min_change)
    figures = figures_of_pair(a, b)
    if args.json:
        print(json.dumps({**res.to_dict(), "task_metric": figures}, indent=2))
        return ExitCode.OK
    con = console()
    for name, path, r in (("A", args.a, a), ("B", args.b, b)):
        con.print(f"{name}: {path}  {label(r)} sha256 {short(r['artifact']['sha256'])} on {r['device']['name']} "
                  f"({fingerprint_id(r)}), {r['runtime']['name']} {r['runtime']['version']}, "
                  f"{len(r['samples_ms'])} samples", style="dim", markup=False)
    style = {"slower": "red", "faster": "green"}.get(res.verdict)
    con.print(res.line, style=style, markup=False)
    if figures:
        con.print(figures["line"], markup=False)
    for w in res.warnings:
        con.print(f"warning: {w}", style="yellow", markup=False)
    return ExitCode.OK


def cmd_report(args) -> int:
    from rich.table import Table

    from ..report import fmt
    from ..report.report import write_report
    from ..report.tables import figure_cells, verdict_cell, verdict_lines

    out = write_report([Path(p) for p in args.results], Path(args.out))
    s = out["summary"]
    for skipped in s.skipped:
        _say_skipped(skipped.source, skipped.reason)
    con = console()
    t = Table(title=f"{len(s.results)} run(s) on {len(s.fingerprints)} device fingerprint(s)", title_justify="left")
    heads = ["run", "model/target/backend/precision", "artifact", "device", "p50 ms", "p90 ms", "p99 ms",
             "metric", "artifact's", "drop pts"]
    rows = [[e.id, e.label, e.artifact.short, e.device.name, fmt.ms(e.summary.p50_ms), fmt.ms(e.summary.p90_ms),
             fmt.ms(e.summary.p99_ms), *figure_cells(e.figure, short=True)[:1], *figure_cells(e.figure)[2:]]
            for e in s.results]
    # columns by width: p90, p99, the artifact digest and value go first (report.md has them all)
    keep = drop_to_fit(heads, rows, ("p90 ms", "p99 ms", "artifact", "artifact's"), 0, con.width)
    for i in keep:
        t.add_column(heads[i], overflow="fold", no_wrap=heads[i] != heads[1],
                     justify="right" if heads[i].endswith(("ms", "pts", "'s")) else "left")
    for row in rows:
        t.add_row(*(escape(row[i]) for i in keep))
    if s.results:
        con.print(t)
    for e in s.load or []:      # edgeforge load results: one line each, with the SLO pick
        rec = e.analysis.recommendation.line if e.analysis.recommendation else None
        con.print(f"load {e.id}: {e.label} on {e.device.name}, {len(e.levels)} levels"
                  + (", recommended:" if rec else ""), markup=False)
        if rec:
            con.print(rec, markup=False)
    for line in verdict_lines(s.int8_vs_float):     # the INT8 verdicts lead the INT8 lines
        for part in clause_wrap(line, con.width):
            con.print(part, markup=False, style="bold")
    for p in s.int8_vs_float:
        vs = "its fp32 sibling, interleaved" if p.interleaved else f"fp32 {p.float_.id}" if p.float_ else None
        what = f"{fmt.ratio(p.speedup)} vs {vs}, {verdict_cell(p)}" if vs else p.note
        con.print(f"int8 {p.int8.id}: {what}", markup=False, soft_wrap=False)   # wrapped at the width
    for key in ("markdown", "html", "summary_json"):
        con.print(f"wrote {out[key]}", markup=False)
    return ExitCode.OK
