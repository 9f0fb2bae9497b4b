"""The ``load`` verb: a throughput-latency curve on a device, its knee, the settings to ship.

    edgeforge load BUILD_DIR --device D [--concurrency 1,2,4,8] [--batch 1,4] [--threads T,...]
                   [--duration S] [--rate QPS,...] [--sessions shared|own|both]
                   [--slo-p99-ms X] [--min-throughput X] [--max-p99-ms X] [--junit FILE]
"""
from __future__ import annotations

import argparse
import json

from ..errors import ConfigError
from ..options import MAX_THREADS
from ..report import fmt
from ..runner.limits import LOAD_MAX_DURATION_S, LOAD_MAX_RATE, LOAD_MAX_WARMUP_S, LOAD_MAX_WORKERS, MAX_BATCH
from ._common import (
    EXIT_CODES_HELP,
    add_session_flags,
    bench_options,
    console,
    escape,
    number,
    numbers,
    print_gates,
    wrap,
)
from ._render import step_progress

_MAX_MS = 3_600_000.0         # an hour (device.measure.load.MAX_SLO_MS)
_ms = number(float, "milliseconds", at_most=_MAX_MS)
_ips = number(float, "inferences per second", at_most=1e12)


def register(sub) -> None:
    p = sub.add_parser(
        "load", help="load-test a build on a device: throughput-latency curve, knee, SLO pick",
        description=wrap(
            "Runs a load generator on the device, inside the runner (SSH and the network are not "
            "measured). Closed loop: K workers back to back for --duration at each concurrency x "
            "batch x threads, with a shared session (K threads) and/or a session each (K "
            "processes). Open loop (--rate): Poisson arrivals, latency includes queueing, served "
            "by the largest --concurrency workers. Prints each level, the knee (where throughput "
            "grows < 10% while p99 rises) and, with --slo-p99-ms, the settings to ship. One "
            "edgeforge.load/1 JSON per run under --results."),
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("build_dir", metavar="BUILD_DIR")
    p.add_argument("--device", required=True, metavar="NAME", help="device name in the inventory")
    p.add_argument("--concurrency", type=numbers(int, "counts", at_most=LOAD_MAX_WORKERS), default=(1, 2, 4, 8),
                   metavar="K,...", help="concurrent requests (default 1,2,4,8; at most the device's cap: "
                                         "4 per core, at least 8, and no more 'own' sessions than "
                                         "its memory holds at ~200 MB each; --force: up to "
                                         f"{LOAD_MAX_WORKERS})")
    p.add_argument("--batch", type=numbers(int, "counts", at_most=MAX_BATCH), default=(1,), metavar="B,...",
                   help="samples per request (default 1)")
    p.add_argument("--threads", type=numbers(int, "counts", at_most=MAX_THREADS), metavar="T,...",
                   help="runtime threads per session (default: the build's)")
    p.add_argument("--duration", type=number(float, "seconds", at_most=LOAD_MAX_DURATION_S), default=2.0,
                   metavar="S", help="measured seconds per level (default 2)")
    p.add_argument("--warmup", type=number(float, "seconds", allow_zero=True, at_most=LOAD_MAX_WARMUP_S),
                   metavar="S", help="seconds of load before each level is measured (default: "
                                     "duration/4, 0.1 to 1)")
    p.add_argument("--rate", type=numbers(float, "rates", at_most=LOAD_MAX_RATE), metavar="QPS,...",
                   help=f"open loop: Poisson arrivals at these rates (requests/s, at most {LOAD_MAX_RATE:g})")
    p.add_argument("--sessions", choices=["shared", "own", "both"], default="both",
                   help="one session shared by the workers, one each, or both where the "
                        "runtime allows (default both; Paddle Lite: own)")
    p.add_argument("--slo-p99-ms", type=_ms, metavar="X",
                   help="recommend the highest-throughput level with p99 <= X ms")
    add_session_flags(p)
    g = p.add_argument_group("quality gates (exit 1 when one fails)")
    g.add_argument("--min-throughput", type=_ips, metavar="X",
                   help="fail below X inf/s (at the SLO pick with --slo-p99-ms, else the best "
                        "error-free level)")
    g.add_argument("--max-p99-ms", type=_ms, metavar="X",
                   help="fail a --rate level whose p99 exceeds X ms")
    g.add_argument("--junit", metavar="FILE", help="also write the gate results as JUnit XML")
    g.add_argument("--force", action="store_true",
                   help="gate emulated timings anyway; and go over the device's default "
                        f"concurrency cap, up to {LOAD_MAX_WORKERS} workers")
    p.set_defaults(func=cmd_load, runs=None, warmups=None)


def cmd_load(args) -> int:
    from ..device.measure.load import LoadPlan, load, load_gates

    gated = args.min_throughput is not None or args.max_p99_ms is not None
    if args.junit and not gated:
        raise ConfigError("--junit needs a gate: --min-throughput or --max-p99-ms")
    if args.junit:                  # a user's file there: refused before the device is asked
        from ..report.junit import check_junit_path

        check_junit_path(args.junit)
    if args.max_p99_ms is not None and not args.rate:
        raise ConfigError("--max-p99-ms gates p99 at a given rate: pass --rate QPS,...")
    plan = LoadPlan(concurrency=args.concurrency, batch=args.batch, threads=args.threads or (None,),
                    rates=args.rate or (), sessions=None if args.sessions == "both" else (args.sessions,),
                    duration_s=args.duration, warmup_s=args.warmup, slo_p99_ms=args.slo_p99_ms,
                    force=args.force).checked()
    with step_progress(args.quiet) as on_step:
        outcome = load(args.build_dir, args.device, plan, bench_options(args), on_step=on_step)
    if args.json:
        print(json.dumps(outcome.result, indent=2))
    else:
        print_load(outcome.result, outcome.path)
    if not gated:
        return 0
    from ..report.gates import require_passed
    from ..report.junit import write_junit

    gates = load_gates(outcome.result, args.min_throughput, args.max_p99_ms, force=args.force)
    print_gates(gates)
    if args.junit:
        console().print(f"junit: {write_junit(gates, args.junit)}", markup=False)
    require_passed(gates)
    return 0


def _g(v) -> str:
    return fmt.num(v, ".3g")


_WIDTHS = (3, 3, 3, 5, 6, 7, 6, 6, 6, 6, 3, 4, 4, 4)     # 79 columns with the gaps


def _row(cells) -> str:
    return " ".join(c.ljust(w) if i in (0, 13) else c.rjust(w)
                    for i, (c, w) in enumerate(zip(cells, _WIDTHS))).rstrip()


def print_load(result: dict, path) -> None:
    """The levels (one row each, 80 columns), the knees, the SLO pick, where the JSON went."""
    from ..results.knee import figures, load_point

    con = console()
    a, d, rt = result["artifact"], result["device"], result["runtime"]
    opened = result["settings"].get("mode") == "open"
    con.print(f"[bold]{escape(a.get('name') or 'model')}[/bold] ({a['backend']}, {a['precision']}) on "
              f"{escape(d['name'])} — {escape(rt.get('name'))} {escape(rt.get('version') or '')}, "
              f"{result['settings']['duration_s']:g}s per level")
    if result.get("emulated"):
        con.print(f"[yellow]emulated device ({escape(result['emulated'])}): these timings are not "
                  "performance figures[/yellow]")
    knees = {k["knee"] for k in result["analysis"]["knees"] if k["knee"] is not None}
    rec = result["analysis"].get("recommendation") or {}
    con.print(_row(["ses", "thr", "b", "req/s" if opened else "K", "inf/s", "smp/s", "p50", "p90", "p99",
                    "max", "err", "cpu%", "MB", ""]), style="bold", markup=False)
    for i, lv in enumerate(result["levels"]):
        head = [lv["sessions"][:3], str(lv["threads"] or "-"), str(lv["batch"]),
                _g(lv["rate"]) if opened else str(lv["concurrency"])]
        if lv.get("skipped"):
            con.print(_row(head) + "  skipped: " + lv["skipped"][:40], markup=False)
            continue
        mark = "SLO" if rec.get("level") == i else "knee" if i in knees else ""
        con.print(_row([*head, fmt.num(lv.get("inferences_per_s"), ".0f"), fmt.num(lv.get("samples_per_s"), ".0f"),
                        *[_g(lv.get(k)) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")],
                        str(lv.get("errors") or 0) + ("*" if lv.get("unserved") else ""),
                        fmt.num(lv.get("cpu_util_pct"), ".0f"), fmt.num(lv.get("peak_rss_mb"), ".0f"), mark]),
                  markup=False)
    con.print("ses: shared session or own; thr: threads; b: batch; ms; MB: peak RSS", style="dim",
              markup=False)
    if any(lv.get("unserved") for lv in result["levels"]):
        con.print("*: arrivals left unserved when the queue fell a duration behind", style="dim")
    for k in result["analysis"]["knees"]:
        series = f"{k['sessions']}, thr {k['threads'] or '-'}, b {k['batch']}"
        if k["knee"] is None:
            con.print(f"no knee ({series}): still +10% or more at the last level", markup=False)
        else:
            lv = result["levels"][k["knee"]]
            con.print(f"knee ({series}): {load_point(lv)}, {figures(lv)}", markup=False)
    if rec:
        con.print(f"[bold]recommended (p99 <= {result['analysis']['slo_p99_ms']:g} ms):[/bold]")
        con.print(rec["line"], markup=False)
    fp = d["fingerprint"]
    if fp.get("temp_c_before") is not None:
        con.print(f"temperature {fmt.num(fp.get('temp_c_before'), '.1f')} -> "
                  f"{fmt.num(fp.get('temp_c_after'), '.1f')} °C")
    con.print(f"[bold]result[/bold] {escape(path)}")
