"""The measuring verbs: ``bench``, ``run``, ``sweep``.

    edgeforge bench BUILD_DIR --device NAME [bench flags] [gate flags]
    edgeforge bench BUILD_DIR... --devices TAG|NAME|all[,...] [--jobs N] [...]
    edgeforge bench BUILD_DIR... --where KEY=VALUE [--where ...] [--priority N] [...]
    edgeforge run PROJECT --target T --device D [build flags] [bench flags]
    edgeforge sweep PROJECT --target T --device D [--precisions fp32,int8]
                    [--threads 1,2,4] [--power-modes M,...] [bench flags]
"""
from __future__ import annotations

import argparse
import json
import signal

from ..errors import ConfigError, ExitCode, FleetFailed, GateFailed
from ..report import fmt
from ..report.figure import drop_cell
from ._common import (
    EXIT_CODES_HELP,
    add_bench_flags,
    add_budget_flag,
    add_build_flags,
    bench_options,
    build_options,
    check_gate_flags,
    console,
    escape,
    gate_verdict,
    numbers,
    positive_int,
    results_history,
    say_error,
    threads,
    wrap,
)
from ._render import fleet_progress, print_build_summary, print_decision, step_progress
from ._width import BORDER, clause_wrap, drop_to_fit, path_cells, short_id, table_width
from ._project import add_project_arg


def register(sub) -> None:
    b = sub.add_parser(
        "bench", help="push builds to devices over SSH; measure latency and drift there",
        description=wrap("Bench BUILD_DIR on one device (--device NAME), or one or more builds on a fleet "
                    "(--devices TAG|NAME|all, comma-separated; each device gets every build whose target is "
                    "its target, devices in parallel). One bench per device at a time: a lease on the device "
                    "(<workdir>/.lease) makes another bench wait (--wait S) or report the device busy. A device "
                    "that fails 3 benches in a row is marked unhealthy (devices.state.json beside the inventory) "
                    "and skipped until `edgeforge devices check NAME` passes."),
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("build_dir", nargs="+", metavar="BUILD_DIR")
    b.add_argument("--device", metavar="NAME", help="one device by name (one build: a single bench, as before)")
    b.add_argument("--devices", metavar="SEL", help="devices by tag or name (comma-separated), or 'all'")
    b.add_argument("--where", action="append", metavar="KEY=VALUE",
                   help="the labgrid places with this tag (repeat: all of them), each reserved "
                        "for its own benches: the fleet form of bench for a [labgrid] inventory")
    b.add_argument("--jobs", type=positive_int, metavar="N", help="devices benched at once (default: all selected)")
    b.add_argument("--threads", type=threads, metavar="N", help="runtime threads (default: the build's target)")
    b.add_argument("--power-mode", metavar="MODE", help="runtime power mode (default: the build's target)")
    b.add_argument("--profile", action="store_true",
                   help="also record a per-op profile on the device (onnxruntime's node profiler, or "
                        "Paddle Lite's through a benchmark_bin built with --with_profile=ON): "
                        "per node and per op type in the result; see `edgeforge profile`")
    b.add_argument("--end-to-end", action="store_true",
                   help="also time each of the build's raw images ([preprocess] images) through "
                        "decode, pre-processing, inference and post-processing on the device: "
                        "per-stage p50/p99 and the share outside the model in the result")
    add_bench_flags(b, device=False)
    b.set_defaults(func=cmd_bench)

    r = sub.add_parser("run", help="build PROJECT for a target, then bench it on a device",
                       epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_project_arg(r)
    add_build_flags(r, full=False)
    add_budget_flag(r)
    add_bench_flags(r, builds=True)
    r.set_defaults(func=cmd_run)

    w = sub.add_parser(
        "sweep", help="build PROJECT per precision, bench each over threads x power modes on one device",
        description=wrap("Builds PROJECT for each precision (cached), then benches every point of precision x threads "
                    "x power mode on DEVICE, one normal result per point tagged with the sweep id, and prints "
                    "one table (with the INT8 speed-up over fp32 at the same threads and power mode)."),
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_project_arg(w)
    w.add_argument("--target", required=True)
    w.add_argument("--backend", choices=["lite", "onnx"])
    w.add_argument("--precisions", metavar="P,...", help="comma-separated (default: fp32,int8)")
    w.add_argument("--threads", type=numbers(int, "thread counts", at_most=256, as_text=True), metavar="N,...",
                   help="comma-separated (default: 1, 2, 4, ... up to the target's cores)")
    w.add_argument("--power-modes", metavar="M,...", help="comma-separated (default: the target's runtime.power_modes)")
    w.add_argument("--out", metavar="DIR", help="parent directory of the builds (default: build/)")
    w.add_argument("--no-cache", action="store_true")
    add_budget_flag(w)
    add_bench_flags(w, builds=True)
    w.set_defaults(func=cmd_sweep)


# ---------------------------------------------------------------- commands

def cmd_bench(args) -> int:
    check_gate_flags(args)
    if sum(bool(x) for x in (args.device, args.devices, args.where)) > 1:
        raise ConfigError("give one of --device NAME, --devices TAG|NAME|all and --where KEY=VALUE")
    if not (args.device or args.devices or args.where):
        raise ConfigError("bench needs --device NAME, --devices TAG|NAME|all or --where KEY=VALUE")
    if args.device and len(args.build_dir) == 1:
        return _bench_one(args)
    return _bench_fleet(args)


def _bench_one(args) -> int:
    from ..device.measure.pick import bench

    outcome = None
    try:
        with step_progress(args.quiet) as on_step:
            opts = bench_options(args, threads=args.threads, power_mode=args.power_mode, profile=args.profile,
                                end_to_end=args.end_to_end)
            outcome = bench(args.build_dir[0], args.device, opts, on_step=on_step)
        return _report_one(args, outcome)
    except KeyboardInterrupt as exc:
        if outcome is None:
            raise
        from ..device.link.interrupt import after_the_run      # the result is written: say where

        raise after_the_run("bench", args.device, getattr(exc, "signum", None) or signal.SIGINT,
                            outcome.path) from None


def _gated(args, results: list[dict], paths) -> int:
    failure = gate_verdict(args, results, paths)
    if failure is not None:
        raise failure
    return ExitCode.OK


def _report_one(args, outcome) -> int:
    """One bench's output (JSON, or the verdict then the result) and its gates: bench and run."""
    if args.json:
        print(json.dumps(outcome.result, indent=2))
    else:
        print_int8_verdict(outcome.result, results_history(args, [outcome.path]))
        print_bench_result(outcome.result, outcome.path)
    return _gated(args, [outcome.result], [outcome.path])


def _bench_fleet(args) -> int:
    from ..device.measure.fleet import fleet_bench
    from ..lab.config import parse_where

    where = parse_where(args.where)
    with fleet_progress(args.quiet) as on_step:
        opts = bench_options(args, threads=args.threads, power_mode=args.power_mode, profile=args.profile,
                            end_to_end=args.end_to_end)
        outcome = fleet_bench(args.build_dir, args.devices or args.device, opts, jobs=args.jobs,
                              on_step=on_step, where=where)
    if args.json:
        print(json.dumps(outcome.to_dict(), indent=2))
    else:
        new = [j.path for r in outcome.runs for j in r.jobs]
        pool = outcome.results + results_history(args, new)
        for r in outcome.results:          # the INT8 verdicts first, one per model/target/device
            if r["artifact"]["precision"] == "int8":
                console().print(f"{r['artifact'].get('name') or 'model'}/{r['artifact']['target']} on "
                                f"{r['device']['name']}: ", end="", markup=False)
                print_int8_verdict(r, pool)
        print_fleet(outcome)
    results = outcome.results
    gate = gate_verdict(args, results, [j.path for r in outcome.runs for j in r.jobs])
    if gate is not None and (outcome.failed or not results):
        say_error(gate.one_line())          # a device failure takes precedence: exit 4
    if outcome.failed:
        shown = "; ".join(f"{r.name} ({r.error})" for r in outcome.failed)
        tried = len([r for r in outcome.runs if r.jobs])
        raise FleetFailed(f"{len(outcome.failed)} of {tried} devices failed: {shown}")
    if not results:
        raise FleetFailed("no device was benched: "
                          + "; ".join(f"{r.name}: {r.note}" for r in outcome.runs if r.note))
    if gate is not None:
        raise gate
    return ExitCode.OK


def cmd_run(args) -> int:
    from .. import api
    from ..device.measure.pick import bench
    from ..device.link.inventory import load_inventory
    from ..options import AUTO

    check_gate_flags(args)
    dev = load_inventory(args.inventory).get(args.device)   # fail before a build, not after
    if dev.target != args.target:
        raise ConfigError(f"device {dev.name} is a {dev.target}, not a {args.target}",
                          hint=f"use --target {dev.target}")
    opts = build_options(args)
    if opts.precision == AUTO:
        return _run_auto(args)
    with step_progress(args.quiet) as on_step:
        result = api.build(args.project, args.target, opts, out=args.out,
                           on_event=lambda name, phase, info: on_step("build", f"{name} {phase}"),
                           log=lambda msg: on_step("build", msg))
    if not args.quiet:
        print_build_summary(result.manifest, result.out_dir)
    if result.verify_status == "failed":
        raise GateFailed(f"verify failed: {result.manifest['verify'].get('reason')}",
                         hint="not benching it")
    with step_progress(args.quiet) as on_step:
        outcome = bench(result.out_dir, args.device, bench_options(args), on_step=on_step)
    return _report_one(args, outcome)


def _run_auto(args) -> int:
    from ..device.workflow.auto import decide_on_device

    with step_progress(args.quiet) as on_step:
        d = decide_on_device(args.project, args.target, args.device, build_options(args),
                             bench_options(args), out=args.out, on_step=on_step)
    if args.json:
        print(json.dumps(d.result, indent=2))
        return _gated(args, [d.result], [d.path])
    if not args.quiet:
        print_build_summary(d.build.manifest, d.build.out_dir, verdict=False)
    print_bench_result(d.result, d.path)
    print_decision(d.record, d.build.out_dir)
    return _gated(args, [d.result], [d.path])


def cmd_sweep(args) -> int:
    from ..device.measure.sweep import SweepAxes, parse_list, sweep

    check_gate_flags(args)
    bad = [p for p in (args.precisions or "").split(",") if p.strip() and p.strip() not in ("int8", "fp16", "fp32")]
    if bad:
        raise ConfigError(f"unknown precision(s) {', '.join(bad)}: use int8, fp16, fp32")
    with step_progress(args.quiet) as on_step:
        axes = SweepAxes(precisions=parse_list(args.precisions, str, "precision"),
                         threads=parse_list(args.threads, int, "thread count"),
                         power_modes=parse_list(args.power_modes, str, "power mode"))
        outcome = sweep(args.project, args.target, args.device, axes, build_options(args),
                        bench_options(args), out=args.out, on_step=on_step)
    if args.json:
        print(json.dumps({"sweep": outcome.id, "device": outcome.device, "target": outcome.target,
                          "backend": outcome.backend, "notes": outcome.notes,
                          "error": outcome.error.one_line() if outcome.error else None,
                          "points": [{"precision": p.precision, "threads": p.threads, "power_mode": p.power_mode,
                                      "status": p.status, "result": str(p.path) if p.path else None,
                                      "p50_ms": p.p50_ms, "speedup_vs_fp32": outcome.speedup(p), "error": p.error}
                                     for p in outcome.points]}, indent=2))
    else:
        print_sweep(outcome)
    gate = gate_verdict(args, outcome.results, [p.path for p in outcome.points]) if outcome.results else None
    if gate is not None and (outcome.error is not None or outcome.verify_failed):
        say_error(gate.one_line())          # the device error or the failed verify is the exit
    if outcome.error is not None:
        raise outcome.error
    if outcome.verify_failed:
        raise GateFailed(f"verify failed for {', '.join(outcome.verify_failed)}",
                         hint="not benched")
    if gate is not None:
        raise gate
    return ExitCode.OK


def print_int8_verdict(result: dict, pool: list[dict]) -> None:
    """An INT8 run's verdict against the newest comparable fp32 run in ``pool``, first."""
    if result["artifact"]["precision"] != "int8":
        return
    from ..report.verdict import result_verdict

    v, why = result_verdict(result, pool)
    if v is None:
        console().print(f"verdict: none yet ({why})", style="yellow", markup=False, soft_wrap=False)
    else:
        auto = "; --precision auto picks fp32" if v.ship == "fp32" else ""
        console().print(f"verdict: {v.line}{auto}", style="green" if v.ship == "int8" else "yellow",
                        markup=False, soft_wrap=False)          # wrapped at the terminal's width


def print_bench_result(result: dict, path) -> None:
    from rich.table import Table

    from ..report.figure import is_classifier, task_figure

    con = console()
    a, d, s, rt = result["artifact"], result["device"], result["settings"], result["runtime"]
    fp = d["fingerprint"]
    title = (f"{a.get('name') or 'model'} ({a['backend']}, {a['precision']}) on {d['name']} "
             f"[{a['target']}] — {rt.get('name')} {rt.get('version') or ''}").strip()
    t = Table(title=escape(title), title_justify="left", show_header=True)
    for col in ("p50", "p90", "p99", "mean", "MAD", "min", "max", "peak RSS"):
        t.add_column(col, justify="right")
    sm = result["summary"]
    t.add_row(*[fmt.num(sm.get(k), ".3f", " ms") for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "mad_ms",
                                                         "min_ms", "max_ms")],
              fmt.num(sm.get("peak_rss_mb"), ".1f", " MB"))
    con.print(t)
    dr = result["drift"]
    info = Table(show_header=False, box=None, padding=(0, 2))
    info.add_column(style="bold")
    info.add_column(overflow="fold")
    warm = f"{s['warmups']}" + (" (auto" + (", stable" if s.get("warmup_stable") else ", not stable") + ")"
                                if s.get("warmups_requested") == "auto" else "")
    info.add_row("settings", escape(f"{s['runs']} runs, {warm} warmups, threads {s.get('threads')}"
                 + (f", power mode {s['power_mode']}" if s.get("power_mode") else "")
                 + (f", providers {', '.join(s['execution_providers'])}" if s.get("execution_providers") else "")
                 + f", runner {s.get('runner')}, batch {s.get('batch', 1)}"))
    load, place = rt.get("load") or {}, rt.get("placement")
    if load:
        info.add_row("load", f"first {fmt.num(load.get('first_ms'), '.1f', ' ms')}, "
                             f"warm {fmt.num(load.get('warm_ms'), '.1f', ' ms')}")
    if place:
        info.add_row("placement", f"[yellow]{escape(place['warning'])}[/yellow]" if place.get("warning")
                     else escape(place["summary"]))
    fig = task_figure(dr)
    if fig is not None:        # the task's own figure first: top-1 for a classifier only
        info.add_row(fig.kind if fig.kind != "classification" else "accuracy", escape(fig.text()))
    if dr.get("top1_agreement") is not None or dr.get("max_abs_error") is not None:
        if is_classifier(dr) and dr.get("top1_agreement") is not None:
            info.add_row("top-1 agreement", fmt.pct(dr.get("top1_agreement")))
        info.add_row("max abs error", f"{fmt.num(dr.get('max_abs_error'), '.3e')} (mean {fmt.num(dr.get('mean_abs_error'), '.3e')})")
        info.add_row("cosine", fmt.num(dr.get("cosine"), ".6f"))
    elif fig is None or fig.kind == "classification":
        info.add_row("drift", f"[yellow]not measured[/yellow]: {escape(dr.get('skipped', ''))}")
    if result.get("end_to_end"):
        from ..device.measure.endtoend import summary_line

        info.add_row("end to end", escape(summary_line(result["end_to_end"])))
    info.add_row("device", escape(f"{fp.get('cpu_model')}, {fp.get('cores')} cores, {fp.get('arch')}, "
                                  f"kernel {fp.get('kernel')}, governor {fp.get('governor') or '-'}"))
    temps = (f"{fmt.num(fp.get('temp_c_before'), '.1f')} → {fmt.num(fp.get('temp_c_after'), '.1f')} °C"
             if fp.get("temp_c_before") is not None else "no thermal zones")
    info.add_row("conditions", escape(f"temperature {temps}, load {fp.get('load_avg')}"))
    if fp.get("browser"):
        info.add_row("browser", escape(f"{fp['browser']}: cross-origin isolated {fp.get('cross_origin_isolated')}, "
                                       f"{fp.get('threads')} thread(s), wasm SIMD {fp.get('wasm_simd')}"))
    if fp.get("emulated"):
        info.add_row("emulated", f"[yellow]{escape(fp['emulated'])}[/yellow]: these timings are not performance "
                                 "figures; drift and accuracy are the device's own")
    tr = result["transfer"]
    if tr.get("served_over"):           # a browser device: the page fetched what it needed
        info.add_row("transfer", escape(f"{fmt.nbytes(tr['uploaded_bytes'])} served over {tr['served_over']} "
                                        f"({len(tr.get('files') or [])} files) in {tr['seconds']:.2f}s"))
    else:
        info.add_row("transfer", escape(f"{fmt.nbytes(tr['uploaded_bytes'])} in {tr['seconds']:.2f}s"
                     + (f" ({', '.join(tr['files'])})" if tr.get("files") else " (the device already held every file)")))
    con.print(info)
    con.print(f"[bold]result[/bold] {escape(path)}")


def print_fleet(outcome) -> None:
    from rich.table import Table

    con = console()
    t = Table(title=escape(f"fleet {outcome.id}"), title_justify="left")
    heads = ["device", "target", "build", "status", "p50", "p90", "drop pts"]
    style = {"ok": "green", "failed": "red", "not run": "yellow"}
    rows, paths, causes = [], [], []
    for r in outcome.runs:
        if not r.jobs:
            rows.append([r.name, r.device.target, "-", r.status, "-", "-", "-"])
            paths.append(None)
            causes.append(r.note or "")
        for j in r.jobs:
            sm = (j.result or {}).get("summary", {})
            dr = (j.result or {}).get("drift", {})
            rows.append([r.name, r.device.target, j.label, j.status, fmt.num(sm.get("p50_ms"), ".3f", " ms"),
                         fmt.num(sm.get("p90_ms"), ".3f", " ms"), drop_cell(dr)])
            paths.append(j.path)
            causes.append(j.error or r.note or r.error or "")
    # columns by width: p90 and target go first at 80 columns, the result path last
    reserve = BORDER + max([len(short_id(p)) for p in paths if p] + [16])
    keep = drop_to_fit(heads, rows, ("p90", "target"), reserve, con.width)
    for i in keep:
        t.add_column(heads[i], overflow="fold", justify="right" if heads[i] in ("p50", "p90", "drop pts") else "left")
    t.add_column("result / cause", overflow="fold")
    cells, footer = path_cells(paths, table_width([[heads[i], *(row[i] for row in rows)] for i in keep]),
                               con.width)
    for row, cell, cause in zip(rows, cells, causes):
        shown = [f"[{style.get(row[i], 'yellow')}]{escape(row[i])}[/]" if i == 3 else escape(row[i]) for i in keep]
        t.add_row(*shown, escape(cell or cause))
    con.print(t)
    if footer:
        con.print(footer, markup=False)
    active = [r for r in outcome.runs if r.status not in ("idle",)]
    con.print(f"{len(outcome.ok)} of {len(active)} device(s) ok"
              + (f", {len(outcome.failed)} failed" if outcome.failed else "")
              + (f", {sum(r.status == 'skipped' for r in outcome.runs)} skipped"
                 if any(r.status == "skipped" for r in outcome.runs) else ""), markup=False)
    lines = [(f"failed: {r.name} ({r.status}): {r.error}" + (f"; {r.hint}" if r.hint else ""), "red")
             for r in outcome.runs if r.failed]
    lines += [(f"{r.status}: {r.name}: {r.note}", "yellow") for r in outcome.runs if r.status in ("skipped", "idle")]
    lines += [(f"note: {note}", "yellow") for note in outcome.notes]
    for text, colour in lines:         # wrapped at clause boundaries: a phrase stays on one line
        for line in clause_wrap(text, con.width):
            con.print(line, style=colour, markup=False)


def print_sweep(outcome) -> None:
    from rich.table import Table

    con = console()
    t = Table(title=escape(f"sweep {outcome.id}: {outcome.device} [{outcome.target}, {outcome.backend}]"),
              title_justify="left")
    for col in ("precision", "threads", "power mode", "p50", "p90", "p99", "MAD", "drop pts", "vs fp32", "result"):
        t.add_column(col, overflow="fold", justify="left" if col in ("precision", "power mode", "result") else "right")
    for p in outcome.points:        # the INT8 verdicts first, one per threads x power mode
        ref = outcome.reference(p)
        if p.precision == "int8" and p.result and ref is not None:
            con.print(f"{p.threads} thread(s)" + (f", {p.power_mode}" if p.power_mode else "") + ": ",
                      end="", markup=False)
            print_int8_verdict(p.result, [ref])
    rows = []
    for p in outcome.points:
        sm = (p.result or {}).get("summary", {})
        dr = (p.result or {}).get("drift", {})
        sp = outcome.speedup(p)
        rows.append([p.precision, str(p.threads), p.power_mode or "-",
                     *[fmt.num(sm.get(k), ".3f", " ms") for k in ("p50_ms", "p90_ms", "p99_ms", "mad_ms")],
                     drop_cell(dr), "-" if sp is None else f"{sp:.2f}x"])
    heads = [str(c.header) for c in t.columns[:-1]]
    # columns by width: p99, MAD, p90 and the power mode go first at 80 columns, the result last
    reserve = BORDER + max([len(short_id(p.path)) for p in outcome.points if p.path] + [16])
    keep = drop_to_fit(heads, rows, ("p99", "MAD", "p90", "power mode"), reserve, con.width)
    t.columns = [t.columns[i] for i in keep] + [t.columns[-1]]
    cells, footer = path_cells([p.path for p in outcome.points],
                               table_width([[heads[i], *(r[i] for r in rows)] for i in keep]), con.width)
    for row, cell, p in zip(rows, cells, outcome.points):
        t.add_row(*(escape(row[i]) for i in keep), escape(cell or p.error or p.status))
    con.print(t)
    if footer:
        con.print(footer, markup=False)
    for note in outcome.notes:
        for line in clause_wrap(f"note: {note}", con.width):
            con.print(line, style="yellow", markup=False)
