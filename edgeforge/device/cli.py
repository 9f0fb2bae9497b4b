"""CLI verbs for devices: ``bench``, ``run``, ``sweep`` and ``devices``. Loaded by edgeforge.cli.

    edgeforge bench BUILD_DIR --device NAME [bench flags] [gate flags]          one build, one device
    edgeforge bench BUILD_DIR... --devices TAG|NAME|all[,...] [--jobs N] [...]  a fleet, in parallel
    edgeforge run PROJECT --target T --device D [--backend lite|onnx] [--precision P] [bench flags]
    edgeforge sweep PROJECT --target T --device D [--precisions fp32,int8] [--threads 1,2,4]
                    [--power-modes M,...] [bench flags] [gate flags]
    edgeforge devices [list] [--inventory FILE]
    edgeforge devices check NAME [--inventory FILE] [--trust-new-host]   (clears an unhealthy mark)

bench flags: --runs N --warmups auto|N --timeout S --connect-timeout S --wait S --retries N
--trust-new-host --inventory FILE --results DIR --json -q
gate flags: --max-accuracy-drop POINTS --max-p50-ms MS --min-int8-speedup X --junit FILE
"""
from __future__ import annotations

import argparse
import json
from contextlib import contextmanager

from ..errors import ConfigError, DeviceError

EXIT_OK, EXIT_GATE, EXIT_DEVICE = 0, 1, 4

EXIT_CODES_HELP = """exit codes: 0 ok; 1 a quality gate failed (or a build failed verify); 2 usage or configuration
(nothing was benched); 3 a build pass failed; 4 a device failed (unreachable after retries, lost
mid-run, busy, runner failed, marked unhealthy).
Precedence: 4 over 1 -- with several devices, the run goes on when one fails and every result
is kept, gates are still evaluated (and --junit written) over the results that landed, but the
exit code is 1 for a failed gate only when every device succeeded; otherwise it is 4.
"""


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _f(v, spec=".3f", suffix=""):
    return "-" if v is None else f"{format(v, spec)}{suffix}"


def escape(text) -> str:
    from rich.markup import escape as _escape

    return _escape(str(text))


def _pct(v):
    return "-" if v is None else f"{v * 100:.2f}%"


def _bytes(n):
    from ..cli import _fmt_bytes

    return _fmt_bytes(n)


# ---------------------------------------------------------------- progress

@contextmanager
def _progress(quiet: bool):
    """Yields on_step(step, message): one spinner line per step on stderr, started on the first step."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=_console(stderr=True), transient=False, disable=quiet)
    tasks: dict[str, int] = {}

    def on_step(step: str, message: str):
        if not tasks:
            progress.start()
        for name, tid in tasks.items():
            if name != step:
                progress.update(tid, total=1, completed=1)
        if step not in tasks:
            tasks[step] = progress.add_task(escape(f"{step}: {message}"), total=None)
        else:
            progress.update(tasks[step], description=escape(f"{step}: {message}"))

    try:
        yield on_step
    finally:
        if tasks:
            for tid in tasks.values():
                progress.update(tid, total=1, completed=1)
            progress.stop()


# ---------------------------------------------------------------- result table

def print_bench_result(result: dict, path) -> None:
    from rich.table import Table

    con = _console()
    a, d, s, rt = result["artifact"], result["device"], result["settings"], result["runtime"]
    fp = d["fingerprint"]
    title = (f"{a.get('name') or 'model'} ({a['backend']}, {a['precision']}) on {d['name']} "
             f"[{a['target']}] — {rt.get('name')} {rt.get('version') or ''}").strip()
    t = Table(title=escape(title), title_justify="left", show_header=True)
    for col in ("p50", "p90", "p99", "mean", "MAD", "min", "max", "peak RSS"):
        t.add_column(col, justify="right")
    sm = result["summary"]
    t.add_row(*[_f(sm.get(k), ".3f", " ms") for k in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "mad_ms",
                                                         "min_ms", "max_ms")],
              _f(sm.get("peak_rss_mb"), ".1f", " MB"))
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
    if dr.get("top1_agreement") is not None or dr.get("max_abs_error") is not None:
        info.add_row("top-1 agreement", _pct(dr.get("top1_agreement")))
        if dr.get("accuracy") is not None:
            info.add_row("accuracy", f"{_pct(dr.get('accuracy'))} (float {_pct(dr.get('float_accuracy'))}, "
                                     f"drop {_f(dr.get('accuracy_drop'), '.2f')} points)")
        info.add_row("max abs error", f"{_f(dr.get('max_abs_error'), '.3e')} (mean {_f(dr.get('mean_abs_error'), '.3e')})")
        info.add_row("cosine", _f(dr.get("cosine"), ".6f"))
    else:
        info.add_row("drift", f"[yellow]not measured[/yellow]: {escape(dr.get('skipped', ''))}")
    info.add_row("device", escape(f"{fp.get('cpu_model')}, {fp.get('cores')} cores, {fp.get('arch')}, "
                                  f"kernel {fp.get('kernel')}, governor {fp.get('governor') or '-'}"))
    temps = (f"{_f(fp.get('temp_c_before'), '.1f')} → {_f(fp.get('temp_c_after'), '.1f')} °C"
             if fp.get("temp_c_before") is not None else "no thermal zones")
    info.add_row("conditions", escape(f"temperature {temps}, load {fp.get('load_avg')}"))
    tr = result["transfer"]
    info.add_row("transfer", escape(f"{_bytes(tr['uploaded_bytes'])} in {tr['seconds']:.2f}s"
                 + (f" ({', '.join(tr['files'])})" if tr.get("files") else " (the device already held every file)")))
    con.print(info)
    con.print(f"[bold]result[/bold] {escape(path)}")


def print_devices(inv) -> None:
    from rich.table import Table

    from .health import HealthStore

    state = HealthStore(inv.path).read()
    t = Table(title=escape(f"devices in {inv.path}"), title_justify="left")
    for col in ("device", "address", "target", "python", "workdir", "tags", "health"):
        t.add_column(col)
    for name in inv.names():
        d = inv.devices[name]
        e = state.get(name) or {}
        n = int(e.get("consecutive_failures") or 0)
        health = ("[red]unhealthy[/red]" if e.get("unhealthy") else
                  f"[yellow]{n} failure(s)[/yellow]" if n else "ok")
        t.add_row(*[escape(x) for x in (name, d.address, d.target, d.python, d.workdir, ", ".join(d.tags))], health)
    _console().print(t)


def print_check(report: dict) -> None:
    from rich.table import Table

    con = _console()
    fp = report["fingerprint"]
    head = f"({report['address']}), target {report['target']}"
    con.print(f"[bold]{escape(report['device'])}[/bold] {escape(head)}")
    f = Table(show_header=False, box=None, padding=(0, 2))
    f.add_column(style="bold")
    f.add_column(overflow="fold")
    f.add_row("cpu", escape(f"{fp.get('cpu_model')} ({fp.get('cores')} cores, {fp.get('arch')})"))
    f.add_row("kernel", escape(f"{fp.get('os')} {fp.get('kernel')}"))
    f.add_row("governor", escape(fp.get("governor") or "-"))
    f.add_row("temperature", _f(fp.get("temp_c"), ".1f", " °C") if fp.get("temp_c") is not None else "-")
    f.add_row("load", escape(fp.get("load_avg")))
    f.add_row("memory", f"{_f(fp.get('mem_available_mb'), '.0f')} of {_f(fp.get('mem_total_mb'), '.0f')} MB free")
    f.add_row("python", escape(f"{report['python']['version']} ({report['python']['executable']})"))
    for host, key in report.get("recorded_host_keys", []):
        f.add_row("host key", escape(f"recorded {key} for {host}"))
    con.print(f)
    r = Table(title="runtimes", title_justify="left")
    for col in ("runtime", "present", "version", "details"):
        r.add_column(col)
    for name, info in report["runtimes"].items():
        present = bool(info.get("present"))
        details = ", ".join(info.get("providers", [])) if present else info.get("error", "")
        if info.get("path"):
            details = f"{info['path']} {details}".strip()
        r.add_row(escape(name), "[green]yes[/green]" if present else "[red]no[/red]", escape(info.get("version") or "-"),
                  escape(details))
    con.print(r)
    c = Table(title=escape(f"matches target {report['target']}"), title_justify="left")
    for col in ("check", "result", "detail"):
        c.add_column(col)
    for ch in report["checks"]:
        mark = "[green]ok[/green]" if ch["ok"] else ("[red]no[/red]" if ch["required"] else "[yellow]no (optional)[/yellow]")
        c.add_row(escape(ch["check"]), mark, escape(ch["detail"]))
    con.print(c)


@contextmanager
def _fleet_progress(quiet: bool):
    """Yields on_step(device, step, message): one spinner line per device on stderr."""
    import threading

    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=_console(stderr=True), transient=False, disable=quiet)
    tasks: dict[str, int] = {}
    lock = threading.Lock()
    final = {"done", "failed", "busy", "skipped"}

    def on_step(device: str, step: str, message: str):
        with lock:
            if not tasks:
                progress.start()
            desc = escape(f"{device}: {step}: {message}" if message else f"{device}: {step}")
            if device not in tasks:
                tasks[device] = progress.add_task(desc, total=None)
            else:
                progress.update(tasks[device], description=desc)
            if step in final:
                progress.update(tasks[device], total=1, completed=1)

    try:
        yield on_step
    finally:
        if tasks:
            for tid in tasks.values():
                progress.update(tid, total=1, completed=1)
            progress.stop()


def print_fleet(outcome) -> None:
    from rich.table import Table

    con = _console()
    t = Table(title=escape(f"fleet {outcome.id}"), title_justify="left")
    for col in ("device", "target", "build", "status", "p50", "p90", "drop pts", "result / cause"):
        t.add_column(col, overflow="fold", justify="right" if col in ("p50", "p90", "drop pts") else "left")
    style = {"ok": "green", "failed": "red", "not run": "yellow"}
    for r in outcome.runs:
        if not r.jobs:
            t.add_row(escape(r.name), escape(r.device.target), "-", r.status, "-", "-", "-", escape(r.note or ""))
        for j in r.jobs:
            sm = (j.result or {}).get("summary", {})
            dr = (j.result or {}).get("drift", {})
            where = str(j.path) if j.path else (j.error or r.note or r.error or "")
            t.add_row(escape(r.name), escape(r.device.target), escape(j.label),
                      f"[{style.get(j.status, 'yellow')}]{j.status}[/]", _f(sm.get("p50_ms"), ".3f", " ms"),
                      _f(sm.get("p90_ms"), ".3f", " ms"), _f(dr.get("accuracy_drop"), ".2f"), escape(where))
    con.print(t)
    active = [r for r in outcome.runs if r.status not in ("idle",)]
    con.print(f"{len(outcome.ok)} of {len(active)} device(s) ok"
              + (f", {len(outcome.failed)} failed" if outcome.failed else "")
              + (f", {sum(r.status == 'skipped' for r in outcome.runs)} skipped"
                 if any(r.status == "skipped" for r in outcome.runs) else ""), markup=False)
    for r in outcome.runs:
        if r.failed:
            con.print(f"failed: {r.name} ({r.status}): {r.error}" + (f"; {r.hint}" if r.hint else ""),
                      style="red", markup=False)
    for r in outcome.runs:
        if r.status in ("skipped", "idle"):
            con.print(f"{r.status}: {r.name}: {r.note}", style="yellow", markup=False)
    for note in outcome.notes:
        con.print(f"note: {note}", style="yellow", markup=False)


def print_sweep(outcome) -> None:
    from rich.table import Table

    con = _console()
    t = Table(title=escape(f"sweep {outcome.id}: {outcome.device} [{outcome.target}, {outcome.backend}]"),
              title_justify="left")
    for col in ("precision", "threads", "power mode", "p50", "p90", "p99", "MAD", "drop pts", "vs fp32", "result"):
        t.add_column(col, overflow="fold", justify="left" if col in ("precision", "power mode", "result") else "right")
    for p in outcome.points:
        sm = (p.result or {}).get("summary", {})
        dr = (p.result or {}).get("drift", {})
        sp = outcome.speedup(p)
        t.add_row(p.precision, str(p.threads), escape(p.power_mode or "-"),
                  *[_f(sm.get(k), ".3f", " ms") for k in ("p50_ms", "p90_ms", "p99_ms", "mad_ms")],
                  _f(dr.get("accuracy_drop"), ".2f"), "-" if sp is None else f"{sp:.2f}x",
                  escape(str(p.path) if p.path else (p.error or p.status)))
    con.print(t)
    for note in outcome.notes:
        con.print(f"note: {note}", style="yellow", markup=False)


# ---------------------------------------------------------------- gates

def _check_gate_flags(args) -> None:
    """Before anything runs: --junit needs a gate, thresholds must be valid."""
    from ..report.cli import gates_requested
    from ..report.gates import evaluate_gates

    if getattr(args, "junit", None) and not gates_requested(args):
        raise ConfigError("--junit needs a gate: --max-accuracy-drop, --max-p50-ms or --min-int8-speedup")
    evaluate_gates([], max_accuracy_drop=args.max_accuracy_drop, max_p50_ms=args.max_p50_ms,
                   min_int8_speedup=args.min_int8_speedup)


def _gate(args, results: list[dict], new_paths=()) -> int:
    """Gates over ``results``; earlier runs in the results directory may serve as the fp32
    counterparts of INT8 runs (--min-int8-speedup)."""
    from ..report.cli import apply_gates, gates_requested

    if not gates_requested(args):
        return apply_gates(args, results)
    reference = []
    if args.min_int8_speedup is not None:
        import os
        from pathlib import Path

        from ..report.load import load_results

        d = Path(args.results or os.environ.get("EDGEFORGE_RESULTS", "results"))
        skip = {Path(p).resolve() for p in new_paths if p}
        try:
            reference = [r for p, r in load_results([d], on_skip=lambda *_: None) if p.resolve() not in skip]
        except ConfigError:
            reference = []
    return apply_gates(args, results, reference=reference)


# ---------------------------------------------------------------- commands

def cmd_bench(args) -> int:
    _check_gate_flags(args)
    if args.device and args.devices:
        raise ConfigError("give --device NAME or --devices TAG|NAME|all, not both")
    if not (args.device or args.devices):
        raise ConfigError("bench needs --device NAME or --devices TAG|NAME|all")
    if args.device and len(args.build_dir) == 1:
        return _bench_one(args)
    return _bench_fleet(args)


def _bench_one(args) -> int:
    from .bench import bench

    with _progress(args.quiet) as on_step:
        outcome = bench(args.build_dir[0], args.device, runs=args.runs, warmups=args.warmups, timeout=args.timeout,
                        connect_timeout=args.connect_timeout, trust_new_host=args.trust_new_host,
                        inventory=args.inventory, results_dir=args.results, on_step=on_step,
                        threads=args.threads, power_mode=args.power_mode, wait=args.wait, retries=args.retries)
    if args.json:
        print(json.dumps(outcome.result, indent=2))
    else:
        print_bench_result(outcome.result, outcome.path)
    return _gate(args, [outcome.result], [outcome.path])


def _bench_fleet(args) -> int:
    from .fleet import fleet_bench

    with _fleet_progress(args.quiet) as on_step:
        outcome = fleet_bench(args.build_dir, args.devices or args.device, inventory=args.inventory, runs=args.runs,
                              warmups=args.warmups, timeout=args.timeout, connect_timeout=args.connect_timeout,
                              threads=args.threads, power_mode=args.power_mode, wait=args.wait,
                              retries=args.retries, jobs=args.jobs, trust_new_host=args.trust_new_host,
                              results_dir=args.results, on_step=on_step)
    if args.json:
        print(json.dumps(outcome.to_dict(), indent=2))
    else:
        print_fleet(outcome)
    results = outcome.results
    gate = _gate(args, results, [j.path for r in outcome.runs for j in r.jobs])
    err = _console(stderr=True)
    if outcome.failed:
        shown = "; ".join(f"{r.name} ({r.error})" for r in outcome.failed)
        err.print(f"error: {len(outcome.failed)} of {len([r for r in outcome.runs if r.jobs])} devices failed: {shown}",
                  style="red", markup=False)
        return EXIT_DEVICE
    if not results:
        err.print("error: no device was benched: "
                  + "; ".join(f"{r.name}: {r.note}" for r in outcome.runs if r.note), style="red", markup=False)
        return EXIT_DEVICE
    return gate


def cmd_run(args) -> int:
    from .. import api
    from ..cli import print_build_summary
    from .bench import bench
    from .inventory import load_inventory

    _check_gate_flags(args)
    dev = load_inventory(args.inventory).get(args.device)   # fail before a build, not after
    if dev.target != args.target:
        raise ConfigError(f"device {dev.name} is a {dev.target}, not a {args.target}",
                          hint=f"use --target {dev.target}")
    with _progress(args.quiet) as on_step:
        result = api.build(args.project, args.target, out=args.out, precision=args.precision,
                           backend=args.backend, no_cache=args.no_cache,
                           on_event=lambda name, phase, info: on_step("build", f"{name} {phase}"),
                           log=lambda msg: on_step("build", msg))
    if not args.quiet:
        print_build_summary(result.manifest, result.out_dir)
    if result.verify_status == "failed":
        _console(stderr=True).print(f"error: verify failed: {result.manifest['verify'].get('reason')}; "
                                    "not benching it", style="red")
        return EXIT_GATE
    with _progress(args.quiet) as on_step:
        outcome = bench(result.out_dir, args.device, runs=args.runs, warmups=args.warmups, timeout=args.timeout,
                        connect_timeout=args.connect_timeout, trust_new_host=args.trust_new_host,
                        inventory=args.inventory, results_dir=args.results, on_step=on_step,
                        wait=args.wait, retries=args.retries)
    if args.json:
        print(json.dumps(outcome.result, indent=2))
    else:
        print_bench_result(outcome.result, outcome.path)
    return _gate(args, [outcome.result], [outcome.path])


def cmd_sweep(args) -> int:
    from .sweep import parse_list, sweep

    _check_gate_flags(args)
    bad = [p for p in (args.precisions or "").split(",") if p.strip() and p.strip() not in ("int8", "fp16", "fp32")]
    if bad:
        raise ConfigError(f"unknown precision(s) {', '.join(bad)}: use int8, fp16, fp32")
    with _progress(args.quiet) as on_step:
        outcome = sweep(args.project, args.target, args.device, backend=args.backend,
                        precisions=parse_list(args.precisions, str, "precision"),
                        threads=parse_list(args.threads, int, "thread count"),
                        power_modes=parse_list(args.power_modes, str, "power mode"), out=args.out,
                        no_cache=args.no_cache, runs=args.runs, warmups=args.warmups, timeout=args.timeout,
                        connect_timeout=args.connect_timeout, wait=args.wait, retries=args.retries,
                        trust_new_host=args.trust_new_host, inventory=args.inventory, results_dir=args.results,
                        on_step=on_step)
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
    gate = _gate(args, outcome.results, [p.path for p in outcome.points]) if outcome.results else EXIT_OK
    if outcome.error is not None:
        raise outcome.error
    if outcome.verify_failed:
        _console(stderr=True).print(f"error: verify failed for {', '.join(outcome.verify_failed)}; not benched",
                                    style="red", markup=False)
        return EXIT_GATE
    return gate


def cmd_devices(args) -> int:
    from .inventory import load_inventory

    if args.action == "list":
        if args.name:
            raise ConfigError("`edgeforge devices list` takes no device name")
        inv = load_inventory(args.inventory)
        if args.json:
            from .health import HealthStore

            state = HealthStore(inv.path).read()
            print(json.dumps({n: {**inv.devices[n].model_dump(mode="json"), "health": state.get(n)}
                              for n in inv.names()}, indent=2))
        else:
            print_devices(inv)
        return EXIT_OK
    if not args.name:
        raise ConfigError("`edgeforge devices check` needs a device name")
    from .check import check_device

    with _progress(args.quiet) as on_step:
        on_step("check", f"connecting to {args.name}")
        report = check_device(args.name, inventory=args.inventory, connect_timeout=args.connect_timeout,
                              timeout=args.timeout, trust_new_host=args.trust_new_host)
    if args.json:
        from .health import HealthStore

        state = HealthStore(load_inventory(args.inventory).path).get(args.name)
        print(json.dumps({**report, "health": state or None}, indent=2))
    else:
        print_check(report)
    if not report["matches"]:
        failed = [f"{c['check']} ({c['detail']})" for c in report["checks"] if c["required"] and not c["ok"]]
        raise DeviceError(args.name, f"does not match target {report['target']}: {'; '.join(failed)}")
    from .health import HealthStore

    store = HealthStore(load_inventory(args.inventory).path)
    if store.clear(args.name) and not args.json:
        _console().print(f"cleared the unhealthy mark on {escape(args.name)} in {escape(store.path)}")
    return EXIT_OK


def _number(cast, what: str, allow_zero: bool):
    """An argparse type: a number of ``cast`` that is > 0 (or >= 0), else a one-line ConfigError."""
    bound = ">= 0" if allow_zero else "> 0"

    def parse(text: str):
        try:
            v = cast(text)
        except ValueError:
            raise ConfigError(f"expected {what}, not {text!r}") from None
        if v < 0 or (v == 0 and not allow_zero):
            raise ConfigError(f"expected {what} {bound}, not {text!r}")
        return v

    return parse


_positive_float = _number(float, "seconds", allow_zero=False)
_positive_int = _number(int, "a count", allow_zero=False)
_nonneg_float = _number(float, "seconds", allow_zero=True)
_nonneg_int = _number(int, "a count", allow_zero=True)


def _add_bench_flags(p, device: bool = True) -> None:
    from ..report.cli import add_gate_arguments
    from .bench import RETRIES

    if device:
        p.add_argument("--device", required=True, metavar="NAME", help="device name in the inventory")
    p.add_argument("--runs", type=_positive_int, metavar="N", help="timed runs (default: the target's bench.runs)")
    p.add_argument("--warmups", metavar="auto|N", help="'auto' (until timings settle) or a count (default: the target's)")
    p.add_argument("--timeout", type=_positive_float, metavar="S", help="seconds for the run on the device (default: the target's)")
    p.add_argument("--connect-timeout", type=_positive_float, metavar="S", help="seconds to connect (default: the target's)")
    p.add_argument("--wait", type=_nonneg_float, default=0.0, metavar="S",
                   help="wait up to S seconds for a device another bench holds (default 0: report it busy, exit 4)")
    p.add_argument("--retries", type=_nonneg_int, default=RETRIES, metavar="N",
                   help=f"connect again up to N times after a transient failure (refused, reset, timed out), "
                        f"backing off 0.5s, 1s, 2s, ... (default {RETRIES})")
    p.add_argument("--trust-new-host", action="store_true", help="accept and record an unknown host key")
    p.add_argument("--inventory", metavar="FILE", help="devices.toml (default: $EDGEFORGE_DEVICES, then ./devices.toml)")
    p.add_argument("--results", metavar="DIR", help="where result JSON goes (default: $EDGEFORGE_RESULTS or ./results)")
    p.add_argument("--json", action="store_true", help="print the result JSON instead of a table")
    p.add_argument("--quiet", "-q", action="store_true")
    add_gate_arguments(p)


def _wrap(text: str) -> str:
    import textwrap

    return textwrap.fill(text, width=100)


def register_commands(sub) -> None:
    b = sub.add_parser(
        "bench", help="push builds to devices over SSH; measure latency and drift there",
        description=_wrap("Bench BUILD_DIR on one device (--device NAME), or one or more builds on a fleet "
                    "(--devices TAG|NAME|all, comma-separated; each device gets every build whose target is "
                    "its target, devices in parallel). One bench per device at a time: a lease on the device "
                    "(<workdir>/.lease) makes another bench wait (--wait S) or report the device busy. A device "
                    "that fails 3 benches in a row is marked unhealthy (devices.state.json beside the inventory) "
                    "and skipped until `edgeforge devices check NAME` passes."),
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("build_dir", nargs="+", metavar="BUILD_DIR")
    b.add_argument("--device", metavar="NAME", help="one device by name (one build: a single bench, as before)")
    b.add_argument("--devices", metavar="SEL", help="devices by tag or name (comma-separated), or 'all'")
    b.add_argument("--jobs", type=_positive_int, metavar="N", help="devices benched at once (default: all selected)")
    b.add_argument("--threads", type=_positive_int, metavar="N", help="runtime threads (default: the build's target)")
    b.add_argument("--power-mode", metavar="MODE", help="runtime power mode (default: the build's target)")
    _add_bench_flags(b, device=False)
    b.set_defaults(func=cmd_bench)

    r = sub.add_parser("run", help="build PROJECT for a target, then bench it on a device",
                       epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("project")
    r.add_argument("--target", required=True)
    r.add_argument("--backend", choices=["lite", "onnx"])
    r.add_argument("--precision", choices=["int8", "fp16", "fp32"])
    r.add_argument("--out", help="build directory (default: build/<name>-<target>[...])")
    r.add_argument("--no-cache", action="store_true")
    _add_bench_flags(r)
    r.set_defaults(func=cmd_run)

    w = sub.add_parser(
        "sweep", help="build PROJECT per precision, bench each over threads x power modes on one device",
        description=_wrap("Builds PROJECT for each precision (cached), then benches every point of precision x threads "
                    "x power mode on DEVICE, one normal result per point tagged with the sweep id, and prints "
                    "one table (with the INT8 speed-up over fp32 at the same threads and power mode)."),
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    w.add_argument("project")
    w.add_argument("--target", required=True)
    w.add_argument("--backend", choices=["lite", "onnx"])
    w.add_argument("--precisions", metavar="P,...", help="comma-separated (default: fp32,int8)")
    w.add_argument("--threads", metavar="N,...", help="comma-separated (default: 1, 2, 4, ... up to the target's cores)")
    w.add_argument("--power-modes", metavar="M,...", help="comma-separated (default: the target's runtime.power_modes)")
    w.add_argument("--out", metavar="DIR", help="parent directory of the builds (default: build/)")
    w.add_argument("--no-cache", action="store_true")
    _add_bench_flags(w)
    w.set_defaults(func=cmd_sweep)

    d = sub.add_parser("devices", help="list the device inventory, or check one device")
    d.add_argument("action", nargs="?", choices=["list", "check"], default="list")
    d.add_argument("name", nargs="?")
    d.add_argument("--inventory", metavar="FILE", help="devices.toml (default: $EDGEFORGE_DEVICES, then ./devices.toml)")
    d.add_argument("--trust-new-host", action="store_true", help="accept and record an unknown host key")
    d.add_argument("--connect-timeout", type=_positive_float, metavar="S")
    d.add_argument("--timeout", type=_positive_float, metavar="S")
    d.add_argument("--json", action="store_true")
    d.add_argument("--quiet", "-q", action="store_true")
    d.set_defaults(func=cmd_devices)
