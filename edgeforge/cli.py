"""edgeforge command line: a thin layer over edgeforge.api. It prints and exits; nothing else does.

Exit codes: 0 ok, 1 a quality gate failed, 2 usage or configuration, 3 a build pass failed,
4 a device failed.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from typing import Callable

from .errors import ConfigError, EdgeforgeError

EXIT_OK, EXIT_GATE, EXIT_USAGE, EXIT_PASS, EXIT_DEVICE = 0, 1, 2, 3, 4


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def _fmt_bytes(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _fmt(v, spec=".4f") -> str:
    return "-" if v is None else format(v, spec)


# ---------------------------------------------------------------- build

def cmd_build(args) -> int:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from . import api

    err = _console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=err, transient=False, disable=args.quiet) as progress:
        tasks: dict[str, int] = {}

        def on_event(name, phase, info):
            if phase == "start":
                tasks[name] = progress.add_task(f"{name}", total=None)
            else:
                note = "cached" if info["cache_hit"] else f"{info['seconds']:.1f}s"
                progress.update(tasks[name], description=f"{name} [dim]({note})[/dim]", total=1, completed=1)

        def log(msg):
            if tasks:
                last = list(tasks)[-1]
                progress.update(tasks[last], description=f"{last}: [dim]{msg}[/dim]")

        result = api.build(args.project, args.target, out=args.out, precision=args.precision,
                           backend=args.backend, no_cache=args.no_cache, algo=args.calibration,
                           max_accuracy_drop=args.max_accuracy_drop, calibration_search=args.calibration_search,
                           float_fallback=not args.no_fallback, legalize=not args.no_legalize,
                           min_cosine=args.min_cosine, on_event=on_event, log=log)
    print_build_summary(result.manifest, result.out_dir)
    if result.verify_status == "failed":
        err.print(f"error: verify failed: {result.manifest['verify'].get('reason')}; "
                  f"the build is kept in {result.out_dir} for inspection", style="red")
        return EXIT_GATE
    return EXIT_OK


def print_build_summary(m: dict, out_dir) -> None:
    from rich.table import Table

    con = _console()
    t = Table(title=f"{m['name']} → {m['target']} ({m['backend']}, {m['precision']})", title_justify="left")
    t.add_column("step")
    t.add_column("cache")
    t.add_column("seconds", justify="right")
    for s in m["steps"]:
        t.add_row(s["pass"], "hit" if s["cache_hit"] else "miss", f"{s['seconds']:.2f}")
    con.print(t)
    a = m["artifact"]
    fs = m.get("float_size_bytes")
    v = m["verify"]
    pct = lambda x: "-" if x is None else f"{x * 100:.2f}%"  # noqa: E731
    s = Table(show_header=False, box=None, padding=(0, 2))
    s.add_column(style="bold")
    s.add_column()
    s.add_row("artifact", f"{out_dir}/{a['path']}  ({_fmt_bytes(a['size_bytes'])}, sha256 {a['sha256'][:12]}…)")
    if fs and m["precision"] != "fp32":
        s.add_row("float size", f"{_fmt_bytes(fs)}  (float/{m['precision']} = {fs / a['size_bytes']:.2f}x)")
    s.add_row("build time", f"{sum(st['seconds'] for st in m['steps']):.1f}s "
              f"({sum(st['cache_hit'] for st in m['steps'])}/{len(m['steps'])} steps cached)")
    status_style = {"passed": "green", "failed": "red"}.get(v["status"], "yellow")
    s.add_row("verify", f"[{status_style}]{v['status']}[/{status_style}]"
              + (f" on the host ({v['runtime']['name']} {v['runtime']['version']})" if v.get("runtime") else ""))
    if v.get("runtime"):
        s.add_row("top-1 agreement", pct(v.get("top1_agreement")))
        s.add_row("accuracy", f"{pct(v.get('accuracy'))} (float {pct(v.get('float_accuracy'))}, "
                  f"drop {_fmt(v.get('accuracy_drop'), '.2f')} points)")
        s.add_row("max abs error", f"{_fmt(v.get('max_abs_error'), '.3e')} (relative {_fmt(v.get('rel_max_abs_error'), '.2e')})")
        s.add_row("cosine", _fmt(v.get("cosine"), ".6f"))
    elif v.get("float_accuracy") is not None:
        s.add_row("float accuracy", pct(v.get("float_accuracy")))
    con.print(s)
    if v["status"] == "device-only":
        con.print("[dim]verify: device-only — the host cannot run this artifact; `edgeforge bench` measures it on the board[/dim]")
    applied = [r for r in m.get("rewrites", []) if r.get("ops")]
    if applied:
        con.print("legalize rewrites: " + ", ".join(f"{r['rewrite']} ({r['ops']} ops)" for r in applied))
    ab = m.get("accuracy_budget")
    if ab and len(ab.get("attempts") or []) > 1:
        def fig(r):
            return (f"drop {r['accuracy_drop']:.2f} points" if ab.get("criterion", "accuracy_drop") == "accuracy_drop"
                    else f"cosine {r['cosine']:.4f}")
        first = ab["attempts"][0]
        msg = (f"accuracy budget ({ab.get('describe') or ab['budget_points']}): plain INT8 ({first['algo']}) "
               f"{fig(ab['initial'])}; {ab['algo']} calibration, {len(ab['keep_float'])} of "
               f"{ab.get('quantizable_layers') or '?'} layer(s) in float -> {fig(ab['final'])}")
        if ab["keep_float"]:
            shown = ", ".join(ab["keep_float"][:6]) + (", …" if len(ab["keep_float"]) > 6 else "")
            msg += f" ({shown})"
        cost = ab.get("cost") or {}
        if cost and cost.get("p50_ms") is None:
            msg += f"; cost {cost['size_delta_bytes'] / 1024:+.1f} KB ({cost['latency_note']})"
        elif cost:
            msg += (f"; cost {cost['size_delta_bytes'] / 1024:+.1f} KB, p50 {cost['p50_ms_int8']:.3f} -> "
                    f"{cost['p50_ms']:.3f} ms ({cost['latency_note']})")
        from rich.markup import escape

        con.print(escape(msg) if ab["met"] else f"[red]{escape(msg)} — budget still missed[/red]")
    elif m.get("keep_float"):
        con.print("kept in float: " + ", ".join(m["keep_float"]))
    if m.get("calibration_search"):
        con.print("calibration search: " + ", ".join(
            f"{r['algo']} drop {r['accuracy_drop']:.2f} cos {r['cosine']:.4f}" for r in m["calibration_search"])
            + f" -> {m['quantization']['algo']}")


# ---------------------------------------------------------------- targets

def cmd_targets(args) -> int:
    from rich.table import Table

    from .targets import list_targets, load_target

    con = _console()
    if args.action == "show":
        if not args.name:
            raise ConfigError("`edgeforge targets show` needs a target name")
        t = load_target(args.name)
        if args.json:
            import json

            print(json.dumps(t.model_dump(mode="json"), indent=2))
            return EXIT_OK
        con.print(f"[bold]{t.name}[/bold]: {t.description}")
        for section, val in t.model_dump(mode="json").items():
            if isinstance(val, dict):
                con.print(f"[bold]\\[{section}][/bold]")
                for k, v in val.items():
                    con.print(f"  {k} = {v}")
            elif section not in ("name", "description"):
                con.print(f"{section} = {val}")
        return EXIT_OK
    table = Table()
    for col in ("target", "arch", "backend", "precision", "threads", "description"):
        table.add_column(col)
    for name in list_targets():
        t = load_target(name)
        table.add_row(name, t.hardware.arch, "/".join([t.backend.default] + [b for b in t.backends() if b != t.backend.default]),
                      t.precision, str(t.runtime.threads), t.description)
    con.print(table)
    return EXIT_OK


# ---------------------------------------------------------------- check

def cmd_check(args) -> int:
    from rich.table import Table

    from . import api

    report = api.check(args.project, args.target, backend=args.backend)
    con = _console()
    applied = [r for r in report["rewrites"] if r.get("ops")]
    if applied:
        con.print("rewrites legalize applies: " + ", ".join(f"{r['rewrite']} ({r['ops']} ops)" for r in applied))
    if not report["findings"]:
        con.print(f"[green]ok[/green]: {report['target']} ({report['backend']}) takes every op of {report['name']} "
                  f"after legalize ({report['num_ops']} ops)")
        return EXIT_OK
    t = Table(title=f"ops {report['target']} ({report['backend']}) cannot take")
    for col in ("op", "count", "why", "what to do"):
        t.add_column(col)
    for f in report["findings"]:
        t.add_row(f["op"], str(f["count"]), f["reason"], f["remedy"])
    con.print(t)
    return EXIT_PASS


# ---------------------------------------------------------------- cache

def cmd_cache(args) -> int:
    from .cache import Cache

    c = Cache()
    if args.action == "clear":
        n = c.clear()
        print(f"removed {n} cache entries from {c.root}")
    else:
        n = sum(1 for _ in c.root.glob("*/*")) if c.root.exists() else 0
        print(f"{c.root}: {n} entries")
    return EXIT_OK


def _points(text: str) -> float:
    from .device.cli import _number

    return _number(float, "accuracy points", allow_zero=True)(text)


def _cosine(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ConfigError(f"--min-cosine: expected a cosine in (0, 1], not {text!r}") from None
    if not 0 < v <= 1:
        raise ConfigError(f"--min-cosine: expected a cosine in (0, 1], not {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="edgeforge", description="Compile trained Paddle models for edge devices, bench them there.")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    sub.required = True

    b = sub.add_parser("build", help="build PROJECT for a target")
    b.add_argument("project")
    b.add_argument("--target", required=True)
    b.add_argument("--out")
    b.add_argument("--precision", choices=["int8", "fp16", "fp32"])
    b.add_argument("--backend", choices=["lite", "onnx"], help="override the target's default backend")
    b.add_argument("--calibration", choices=["KL", "hist", "mse", "avg", "abs_max"], help="calibration algorithm")
    b.add_argument("--max-accuracy-drop", type=_points, metavar="POINTS",
                   help="INT8 budget in accuracy points, when the evaluation set has labels (default: the target's)")
    b.add_argument("--min-cosine", type=_cosine, metavar="C",
                   help="INT8 budget without labels: worst-output cosine against float (default: the target's, 0.99)")
    b.add_argument("--calibration-search", action="store_true",
                   help="try KL, hist, mse and avg calibration; keep the best on the evaluation set")
    b.add_argument("--no-fallback", action="store_true",
                   help="never keep layers in float; a missed accuracy budget fails the build (exit 1)")
    b.add_argument("--no-legalize", action="store_true",
                   help="skip the legalize pass and pre-flight: hand the raw export to the converter (debugging)")
    b.add_argument("--no-cache", action="store_true")
    b.add_argument("--quiet", "-q", action="store_true")
    b.set_defaults(func=cmd_build)

    t = sub.add_parser("targets", help="list target profiles, or show one")
    t.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    t.add_argument("name", nargs="?")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_targets)

    c = sub.add_parser("check", help="pre-flight: list the ops a target cannot take")
    c.add_argument("project")
    c.add_argument("--target", required=True)
    c.add_argument("--backend", choices=["lite", "onnx"])
    c.set_defaults(func=cmd_check)

    k = sub.add_parser("cache", help="show or clear the build cache")
    k.add_argument("action", nargs="?", choices=["info", "clear"], default="info")
    k.set_defaults(func=cmd_cache)

    for register in EXTRA_COMMANDS:
        register(sub)
    return p


# Other modules (bench, devices, report, ...) add their verbs here.
EXTRA_COMMANDS: list[Callable] = []


def _load_extra_commands() -> None:
    import importlib

    for mod in ("edgeforge.device.cli", "edgeforge.results.cli", "edgeforge.report.cli"):
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        reg = getattr(m, "register_commands", None)
        if reg and reg not in EXTRA_COMMANDS:
            EXTRA_COMMANDS.append(reg)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("EDGEFORGE_DEBUG") == "1"
    try:
        _load_extra_commands()
        args = build_parser().parse_args(argv)
        return args.func(args)
    except EdgeforgeError as exc:
        if debug:
            traceback.print_exc()
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a bug; still one line unless --debug
        if debug:
            traceback.print_exc()
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"error: internal error {type(exc).__name__}: {first} (re-run with --debug and report it)", file=sys.stderr)
        return EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
