"""CLI verbs for devices: ``bench``, ``run`` and ``devices``. Loaded by edgeforge.cli.

    edgeforge bench BUILD_DIR --device NAME [--runs N] [--warmups auto|N] [--timeout S]
                    [--connect-timeout S] [--trust-new-host] [--inventory FILE] [--results DIR]
    edgeforge run PROJECT --target T --device D [--backend lite|onnx] [--precision P] [bench flags]
    edgeforge devices [list] [--inventory FILE]
    edgeforge devices check NAME [--inventory FILE] [--trust-new-host]
"""
from __future__ import annotations

import json
from contextlib import contextmanager

from ..errors import ConfigError, DeviceError

EXIT_OK, EXIT_GATE = 0, 1


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

    t = Table(title=escape(f"devices in {inv.path}"), title_justify="left")
    for col in ("device", "address", "target", "python", "workdir", "tags"):
        t.add_column(col)
    for name in inv.names():
        d = inv.devices[name]
        t.add_row(*[escape(x) for x in (name, d.address, d.target, d.python, d.workdir, ", ".join(d.tags))])
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


# ---------------------------------------------------------------- commands

def cmd_bench(args) -> int:
    from .bench import bench

    with _progress(args.quiet) as on_step:
        outcome = bench(args.build_dir, args.device, runs=args.runs, warmups=args.warmups, timeout=args.timeout,
                        connect_timeout=args.connect_timeout, trust_new_host=args.trust_new_host,
                        inventory=args.inventory, results_dir=args.results, on_step=on_step)
    if args.json:
        print(json.dumps(outcome.result, indent=2))
    else:
        print_bench_result(outcome.result, outcome.path)
    return EXIT_OK


def cmd_run(args) -> int:
    from .. import api
    from ..cli import print_build_summary
    from .bench import bench
    from .inventory import load_inventory

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
                        inventory=args.inventory, results_dir=args.results, on_step=on_step)
    if args.json:
        print(json.dumps(outcome.result, indent=2))
    else:
        print_bench_result(outcome.result, outcome.path)
    return EXIT_OK


def cmd_devices(args) -> int:
    from .inventory import load_inventory

    if args.action == "list":
        if args.name:
            raise ConfigError("`edgeforge devices list` takes no device name")
        inv = load_inventory(args.inventory)
        if args.json:
            print(json.dumps({n: inv.devices[n].model_dump(mode="json") for n in inv.names()}, indent=2))
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
        print(json.dumps(report, indent=2))
    else:
        print_check(report)
    if not report["matches"]:
        failed = [f"{c['check']} ({c['detail']})" for c in report["checks"] if c["required"] and not c["ok"]]
        raise DeviceError(args.name, f"does not match target {report['target']}: {'; '.join(failed)}")
    return EXIT_OK


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"expected seconds, not {text!r}") from None
    if v <= 0:
        raise ConfigError(f"expected seconds > 0, not {text!r}")
    return v


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ConfigError(f"expected a count, not {text!r}") from None
    if v <= 0:
        raise ConfigError(f"expected a count > 0, not {text!r}")
    return v


def _add_bench_flags(p) -> None:
    p.add_argument("--device", required=True, metavar="NAME", help="device name in the inventory")
    p.add_argument("--runs", type=_positive_int, metavar="N", help="timed runs (default: the target's bench.runs)")
    p.add_argument("--warmups", metavar="auto|N", help="'auto' (until timings settle) or a count (default: the target's)")
    p.add_argument("--timeout", type=_positive_float, metavar="S", help="seconds for the run on the device (default: the target's)")
    p.add_argument("--connect-timeout", type=_positive_float, metavar="S", help="seconds to connect (default: the target's)")
    p.add_argument("--trust-new-host", action="store_true", help="accept and record an unknown host key")
    p.add_argument("--inventory", metavar="FILE", help="devices.toml (default: $EDGEFORGE_DEVICES, then ./devices.toml)")
    p.add_argument("--results", metavar="DIR", help="where result JSON goes (default: $EDGEFORGE_RESULTS or ./results)")
    p.add_argument("--json", action="store_true", help="print the result JSON instead of a table")
    p.add_argument("--quiet", "-q", action="store_true")


def register_commands(sub) -> None:
    b = sub.add_parser("bench", help="push a build to a device over SSH; measure latency and drift there")
    b.add_argument("build_dir")
    _add_bench_flags(b)
    b.set_defaults(func=cmd_bench)

    r = sub.add_parser("run", help="build PROJECT for a target, then bench it on a device")
    r.add_argument("project")
    r.add_argument("--target", required=True)
    r.add_argument("--backend", choices=["lite", "onnx"])
    r.add_argument("--precision", choices=["int8", "fp16", "fp32"])
    r.add_argument("--out", help="build directory (default: build/<name>-<target>[...])")
    r.add_argument("--no-cache", action="store_true")
    _add_bench_flags(r)
    r.set_defaults(func=cmd_run)

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
