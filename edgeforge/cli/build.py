"""The build verbs: ``build``, ``check``, ``targets``, ``cache``."""
from __future__ import annotations

import shutil

from ..errors import ConfigError, ExitCode, GateFailed, PassError
from ._common import add_build_flags, build_options, console
from ._render import build_progress, print_build_summary, print_decision
from ._project import add_project_arg


def register(sub) -> None:
    b = sub.add_parser("build", help="build PROJECT for a target")
    add_project_arg(b)
    add_build_flags(b)
    b.add_argument("--quiet", "-q", action="store_true")
    b.set_defaults(func=cmd_build)

    t = sub.add_parser("targets", help="list target profiles, or show one")
    t.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    t.add_argument("name", nargs="?")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_targets)

    c = sub.add_parser("check", help="pre-flight: list the ops a target cannot take")
    add_project_arg(c)
    c.add_argument("--target", required=True)
    c.add_argument("--backend", choices=["lite", "onnx"])
    c.set_defaults(func=cmd_check)

    k = sub.add_parser("cache", help="show, count or clear the build cache")
    k.add_argument("action", nargs="?", choices=["info", "stats", "clear"], default="info",
                   help="stats: local and remote hits, misses and bytes moved")
    k.set_defaults(func=cmd_cache)


def cmd_build(args) -> int:
    from .. import api
    from ..options import AUTO

    opts = build_options(args)
    if opts.precision == AUTO:
        from ..device.workflow.auto import decide_on_host

        with build_progress(args.quiet) as (on_event, log):
            decision = decide_on_host(args.project, args.target, opts, out=args.out, log=log)
        result = decision.build
        print_build_summary(result.manifest, result.out_dir, verdict=False)
        print_decision(decision.record, result.out_dir)
        return ExitCode.OK
    with build_progress(args.quiet) as (on_event, log):
        result = api.build(args.project, args.target, opts, out=args.out, on_event=on_event, log=log)
    print_build_summary(result.manifest, result.out_dir)
    if result.verify_status == "failed":
        raise GateFailed(f"verify failed: {result.manifest['verify'].get('reason')}",
                         hint=f"the build is kept in {result.out_dir} for inspection")
    return ExitCode.OK


def cmd_targets(args) -> int:
    from ..targets import families, load_target

    con = console()
    if args.action == "show":
        if not args.name:
            raise ConfigError("`edgeforge targets show` needs a target name")
        t = load_target(args.name)
        if args.json:
            import json

            print(json.dumps(t.model_dump(mode="json"), indent=2))
            return ExitCode.OK
        con.print(f"[bold]{t.name}[/bold]: {t.description}")
        def table(name, val):          # nested tables (backend.onnx.rules.X) get their own header
            con.print(f"[bold]\\[{name}][/bold]")
            for k, v in val.items():
                if not isinstance(v, dict):
                    con.print(f"  {k} = {v}")
            for k, v in val.items():
                if isinstance(v, dict) and v:
                    table(f"{name}.{k}", v)

        for section, val in t.model_dump(mode="json").items():
            if isinstance(val, dict):
                table(section, val)
            elif section not in ("name", "description"):
                con.print(f"{section} = {val}")
        return ExitCode.OK
    print(targets_table(families(), shutil.get_terminal_size().columns))
    return ExitCode.OK


def targets_table(groups: dict, width: int) -> str:
    """At most two lines a target, grouped by family (the default first, marked *): the
    description wrapped into what is left of ``width``, cut after its second line; a blank
    line between families."""
    import textwrap

    heads = ("target", "family", "arch", "backend", "precision")
    rows = {fam: [(t.name, (f"{fam}*" if t.family_default else fam) if t.family else "-",
                   t.hardware.arch,
                   "/".join([t.backend.default] + [b for b in t.backends() if b != t.backend.default]),
                   t.precision, t.description) for t in members] for fam, members in groups.items()}
    every = [r for rs in rows.values() for r in rs]
    widths = [max([len(h)] + [len(r[i]) for r in every]) for i, h in enumerate(heads)]
    indent = sum(widths) + 2 * len(widths)
    room = max(12, max(width, 40) - indent - 1)

    def line(cells, desc):
        parts = textwrap.wrap(desc, room) or [""]
        if len(parts) > 2:
            parts = parts[:2]
            parts[1] = parts[1][:room - 1].rstrip() + "…"
        first = "  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + parts[0]
        return "\n".join([first] + [" " * indent + p for p in parts[1:]])

    out = [line(heads, "description")]
    for rs in rows.values():
        out.append("")
        out += [line(r[:5], r[5]) for r in rs]
    out += ["", "* the family's default (--target FAMILY); `edgeforge targets show NAME`: all"]
    return "\n".join(out)


def cmd_check(args) -> int:
    from rich.table import Table

    from .. import api

    report = api.check(args.project, args.target, backend=args.backend)
    con = console()
    applied = [r for r in report["rewrites"] if r.get("ops")]
    if applied:
        con.print("rewrites legalize applies: " + ", ".join(f"{r['rewrite']} ({r['ops']} ops)" for r in applied))
    if not report["findings"]:
        con.print(f"[green]ok[/green]: {report['target']} ({report['backend']}) takes every op of {report['name']} "
                  f"after legalize ({report['num_ops']} ops)")
        return ExitCode.OK
    t = Table(title=f"ops {report['target']} ({report['backend']}) cannot take")
    for col in ("op", "count", "why", "what to do"):
        t.add_column(col)
    for f in report["findings"]:
        t.add_row(f["op"], str(f["count"]), f["reason"], f["remedy"])
    con.print(t)
    ops = sum(int(f["count"]) for f in report["findings"])
    raise PassError(f"{report['target']} ({report['backend']}) cannot take {ops} op(s) of {report['name']} "
                    "(the table above says why)", hint="fix them, or pick another --backend")


def cmd_cache(args) -> int:
    from ..cache import Cache

    c = Cache()
    if args.action == "clear":
        n = c.clear()
        print(f"removed {n} cache entries from {c.root}")
    elif args.action == "stats":
        from ..remote_cache import RemoteSettings, stats_lines

        remote = RemoteSettings.resolve()          # a bad URL or user config: exit 2 before any line
        print("\n".join(stats_lines(c)))
        print(f"remote: {remote.where() if remote else 'none set'}")
    else:
        print(f"{c.root}: {c.count()} entries")
    return ExitCode.OK
