"""The profile verb: ``edgeforge profile RESULT [RESULT2]``.

One result: its top ops by time. Two (e.g. fp32 and INT8 of one model on one device): the
per-op speed-up of the second against the first and the share of each one's time in
QuantizeLinear/DequantizeLinear.
"""
from __future__ import annotations

from ..errors import ExitCode
from ._common import console, escape, number


def register(sub) -> None:
    p = sub.add_parser("profile", help="per-op profile of a bench result (bench --profile), "
                                       "or of two side by side; for bench --end-to-end, whether "
                                       "pre/post-processing dominates")
    p.add_argument("a", metavar="RESULT", help="a bench result with a profile")
    p.add_argument("b", metavar="RESULT2", nargs="?", help="a second one (e.g. INT8 against the fp32 RESULT)")
    p.add_argument("--top", type=number(int, "a count", at_most=10_000), default=10, metavar="N",
                   help="op types shown (default 10)")
    p.set_defaults(func=cmd_profile)


def fmt_ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "-"


def cmd_profile(args) -> int:
    from rich.table import Table

    from ..report.load import load_result
    from ..report.pairing import label
    from ..report.profile import op_speedups, profile_of, qdq_share, top_ops

    con = console()
    a = load_result(args.a)
    if args.b is None and a.get("end_to_end"):      # bench --end-to-end: where the time goes
        from ..device.measure.endtoend import dominant

        import textwrap

        emu = a["device"]["fingerprint"].get("emulated")
        line = f"{label(a)} on {a['device']['name']}: {dominant(a['end_to_end'])}" + (
            f" (emulated, {emu}: the shares are not the board's)" if emu else "")
        con.print("\n".join(textwrap.wrap(line, 79, subsequent_indent="  ")), markup=False)
        if not a.get("profile"):
            return ExitCode.OK
    pa = profile_of(a, args.a)
    if args.b is None:
        t = Table(title=escape(f"{label(a)} on {a['device']['name']}: {pa['total_ms']:.3f} ms in "
                               f"{pa['nodes']} nodes"), title_justify="left")
        for col in ("op", "nodes", "ms", "share"):
            t.add_column(col, justify="left" if col == "op" else "right")
        for o in top_ops(pa, args.top):
            t.add_row(escape(o["op"]), str(o["nodes"]), f"{o['ms']:.4f}", f"{o['share'] * 100:.1f}%")
        con.print(t)
        con.print(f"quantize/dequantize: {qdq_share(pa) * 100:.1f}% of the time", markup=False)
        return ExitCode.OK
    b = load_result(args.b)
    pb = profile_of(b, args.b)
    t = Table(title=escape(f"A {label(a)} vs B {label(b)}"), title_justify="left")
    for col in ("op", "A ms", "B ms", "A/B"):
        t.add_column(col, justify="left" if col == "op" else "right")
    for r in op_speedups(pa, pb)[:args.top]:
        t.add_row(escape(r["op"]), "-" if r["ms_a"] is None else f"{r['ms_a']:.4f}",
                  "-" if r["ms_b"] is None else f"{r['ms_b']:.4f}",
                  "-" if r["speedup"] is None else f"{r['speedup']:.2f}x")
    con.print(t)
    con.print(f"total: A {pa['total_ms']:.3f} ms, B {pb['total_ms']:.3f} ms "
              f"({fmt_ratio(pa['total_ms'], pb['total_ms'])}); quantize/dequantize: A "
              f"{qdq_share(pa) * 100:.1f}%, B {qdq_share(pb) * 100:.1f}% of the time", markup=False)
    return ExitCode.OK
