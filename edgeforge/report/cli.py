"""The report verbs: ``edgeforge report``, ``edgeforge compare``, ``edgeforge gate``.

Thin parsers over :mod:`.report`, :mod:`.compare` and :mod:`.gates`; they print and return exit
codes. ``add_gate_arguments`` and ``apply_gates`` let other verbs (``edgeforge bench``) take
the same gate flags. Nothing heavy (scipy, matplotlib) is imported until a verb runs.
"""
from __future__ import annotations

from pathlib import Path

from ..cli import EXIT_GATE, EXIT_OK, _console
from ..errors import ConfigError

_GATE_FLAGS = ("max_accuracy_drop", "max_p50_ms", "min_int8_speedup")


def register_commands(sub) -> None:
    r = sub.add_parser("report", help="render bench results as report.md, report.html and summary.json")
    r.add_argument("results", nargs="+", metavar="RESULTS", help="result files, or directories of *.json")
    r.add_argument("--out", default="report", metavar="DIR", help="output directory (default: ./report)")
    r.set_defaults(func=cmd_report)

    c = sub.add_parser("compare", help="is run B faster or slower than run A, or is it noise?")
    c.add_argument("a", metavar="A.json", help="the baseline run")
    c.add_argument("b", metavar="B.json", help="the run to judge against A")
    c.add_argument("--force", action="store_true",
                   help="compare runs from different device fingerprints or runtimes anyway")
    c.add_argument("--alpha", type=float, metavar="P", help="significance level (default 0.05)")
    c.add_argument("--min-change", type=float, metavar="PERCENT",
                   help="smallest p50 change called significant (default 1)")
    c.add_argument("--json", action="store_true", help="print the comparison as JSON")
    c.set_defaults(func=cmd_compare)

    g = sub.add_parser("gate", help="check results against quality gates; exit 1 if one fails")
    g.add_argument("results", nargs="+", metavar="RESULTS", help="result files, or directories of *.json")
    add_gate_arguments(g)
    g.set_defaults(func=cmd_gate)


# ---------------------------------------------------------------- gates (shared with `bench`)

def add_gate_arguments(parser) -> None:
    grp = parser.add_argument_group("quality gates (exit 1 when one fails)")
    grp.add_argument("--max-accuracy-drop", type=float, metavar="POINTS",
                     help="fail a run whose accuracy drop exceeds POINTS percentage points")
    grp.add_argument("--max-p50-ms", type=float, metavar="MS", help="fail a run whose median latency exceeds MS")
    grp.add_argument("--min-int8-speedup", type=float, metavar="X",
                     help="fail an int8 run less than X times faster (p50) than fp32 of the same model on the same device")
    grp.add_argument("--junit", metavar="FILE", help="also write the gate results as JUnit XML")


def gates_requested(args) -> bool:
    return any(getattr(args, k, None) is not None for k in _GATE_FLAGS)


def apply_gates(args, results: list[dict], reference: list[dict] = ()) -> int:
    """Evaluate the gates given on the command line over ``results``; print them, write --junit.

    ``reference``: earlier runs, not gated, that may be the fp32 counterpart of an INT8 run.
    Returns EXIT_OK (also when no gate was asked for) or EXIT_GATE when one failed.
    """
    if not gates_requested(args):
        if getattr(args, "junit", None):
            raise ConfigError("--junit needs a gate: --max-accuracy-drop, --max-p50-ms or --min-int8-speedup")
        return EXIT_OK
    from .gates import evaluate_gates
    from .junit import write_junit

    gates = evaluate_gates(results, **{k: getattr(args, k) for k in _GATE_FLAGS}, reference=reference)
    print_gates(gates)
    if args.junit:
        _console().print(f"junit: {write_junit(gates, Path(args.junit))}")
    failed = [g for g in gates if not g.passed]
    if failed:
        shown = "; ".join(f"{g.name} on {g.device}: {g.message}" for g in failed[:3])
        more = f" (and {len(failed) - 3} more)" if len(failed) > 3 else ""
        _console(stderr=True).print(f"error: {len(failed)} of {len(gates)} gates failed: {shown}{more}",
                                    style="red", markup=False)
        return EXIT_GATE
    return EXIT_OK


def print_gates(gates) -> None:
    from rich.table import Table

    from .gates import UNITS

    t = Table(title="quality gates", title_justify="left")
    for col in ("status", "device", "gate", "run", "measured", "limit"):
        t.add_column(col, overflow="fold", justify="right" if col in ("measured", "limit") else "left")
    for g in gates:
        unit = UNITS[g.name]
        t.add_row("[green]pass[/green]" if g.passed else "[red]FAIL[/red]", f"{g.device} {g.fingerprint}".strip(),
                  g.name, g.subject or "-", "n/a" if g.measured is None else f"{g.measured:.4g}{unit}",
                  f"{g.threshold:g}{unit}")
    _console().print(t)


# ---------------------------------------------------------------- verbs

def _say_skipped(path, why: str) -> None:
    _console(stderr=True).print(f"skipped {path}: {why}", style="yellow", markup=False)


def cmd_gate(args) -> int:
    from .load import load_results

    if not gates_requested(args):
        raise ConfigError("no gate given: pass --max-accuracy-drop, --max-p50-ms or --min-int8-speedup")
    return apply_gates(args, [r for _, r in load_results(args.results, on_skip=_say_skipped)])


def cmd_compare(args) -> int:
    import json

    from .compare import ALPHA, MIN_CHANGE, compare
    from .keys import fingerprint_id, label, short
    from .load import load_result

    a, b = load_result(args.a), load_result(args.b)
    min_change = MIN_CHANGE if args.min_change is None else args.min_change / 100.0
    res = compare(a, b, force=args.force, alpha=ALPHA if args.alpha is None else args.alpha,
                  min_change=min_change)
    if args.json:
        print(json.dumps(res.to_dict(), indent=2))
        return EXIT_OK
    con = _console()
    for name, path, r in (("A", args.a, a), ("B", args.b, b)):
        con.print(f"{name}: {path}  {label(r)} sha256 {short(r['artifact']['sha256'])} on {r['device']['name']} "
                  f"({fingerprint_id(r)}), {r['runtime']['name']} {r['runtime']['version']}, "
                  f"{len(r['samples_ms'])} samples", style="dim", markup=False)
    style = {"slower": "red", "faster": "green"}.get(res.verdict)
    con.print(res.line, style=style, markup=False)
    for w in res.warnings:
        con.print(f"warning: {w}", style="yellow", markup=False)
    return EXIT_OK


def cmd_report(args) -> int:
    from rich.table import Table

    from . import fmt
    from .report import write_report
    from .tables import verdict_cell

    out = write_report([Path(p) for p in args.results], Path(args.out))
    s = out["summary"]
    for skipped in s["skipped"]:
        _say_skipped(skipped["source"], skipped["reason"])
    con = _console()
    t = Table(title=f"{len(s['results'])} run(s) on {len(s['fingerprints'])} device fingerprint(s)", title_justify="left")
    for col in ("run", "model/target/backend/precision", "artifact", "device", "p50 ms", "p90 ms", "p99 ms", "drop pts"):
        t.add_column(col, overflow="fold", justify="right" if col.endswith(("ms", "pts")) else "left")
    for e in s["results"]:
        t.add_row(e["id"], e["label"], e["artifact"]["short"], f"{e['device']['name']} {e['device']['fingerprint_id']}",
                  fmt.ms(e["summary"].get("p50_ms")), fmt.ms(e["summary"].get("p90_ms")),
                  fmt.ms(e["summary"].get("p99_ms")), fmt.points((e["drift"] or {}).get("accuracy_drop")))
    con.print(t)
    for p in s["int8_vs_float"]:
        what = (f"{fmt.ratio(p['speedup'])} vs fp32 {p['float']['id']}, {verdict_cell(p)}" if p["float"]
                else p["note"])
        con.print(f"int8 {p['int8']['id']}: {what}", markup=False)
    for key in ("markdown", "html", "summary_json"):
        con.print(f"wrote {out[key]}", markup=False)
    return EXIT_OK
