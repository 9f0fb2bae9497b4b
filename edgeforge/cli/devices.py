"""The ``devices`` verb: list the inventory (and a [labgrid] lab's places), check one device,
install its runtime; ``devices emulate`` is cli/emulate.py's.

    edgeforge devices [list] [--inventory FILE]
    edgeforge devices check NAME [--inventory FILE] [connection flags]
    edgeforge devices setup NAME [--inventory FILE] [--package REQ]... [--keep-inventory]
        [--connect-timeout S] [--timeout S] [--wait S] [--retries N] [--trust-new-host]
"""
from __future__ import annotations

import json

from ..errors import ConfigError, ExitCode, Misconfigured
from ..report import fmt
from . import emulate
from ._common import add_connection_flags, connection_options, console, escape
from ._render import say_wrapped, step_progress
from ._width import table_width


def register(sub) -> None:
    d = sub.add_parser("devices", help="list the device inventory, or check one device")
    d.add_argument("action", nargs="?", choices=["list", "check", *emulate.ACTIONS, "setup"], default="list")
    d.add_argument("name", nargs="?")
    add_connection_flags(d)
    d.add_argument("--json", action="store_true")
    d.add_argument("--quiet", "-q", action="store_true")
    g = d.add_argument_group("setup")
    g.add_argument("--package", action="append", metavar="REQ",
                   help="setup: a pip requirement instead of the target's runtime (repeatable)")
    g.add_argument("--keep-inventory", action="store_true",
                   help="setup: do not point the device's python in devices.toml at the new env")
    emulate.add_arguments(d)
    d.set_defaults(func=cmd_devices)


def cmd_devices(args) -> int:
    from ..device.link.inventory import load_inventory

    if args.action in emulate.ACTIONS:
        started = emulate.run(args)
        if started is not None and args.setup:
            return cmd_setup(*started, args)
        return ExitCode.OK
    if args.action == "setup":
        if not args.name:
            raise ConfigError("`edgeforge devices setup` needs a device name")
        return cmd_setup(args.name, args.inventory, args)
    if args.action == "list":
        if args.name:
            raise ConfigError("`edgeforge devices list` takes no device name")
        inv = load_inventory(args.inventory)
        if args.json:
            from ..device.link.health import HealthStore

            state = HealthStore(inv.path).read()
            doc = {n: {**inv.devices[n].model_dump(mode="json"), "health": state.get(n)} for n in inv.names()}
            if inv.lab is not None:
                doc = {"devices": doc, "labgrid": _lab_json(inv, state)}
            print(json.dumps(doc, indent=2))
        else:
            print_devices(inv)
            if inv.lab is not None:
                print_lab(inv)
        return ExitCode.OK
    if not args.name:
        raise ConfigError("`edgeforge devices check` needs a device name")
    from ..device.link.check import check_device

    dev = load_inventory(args.inventory).get(args.name)
    with step_progress(args.quiet) as on_step:
        if dev.transport == "browser":
            from ..device.browser.check import check_browser

            on_step("check", f"{args.name}: opening a page in headless Chromium")
            report = check_browser(dev)
        else:
            on_step("check", f"connecting to {args.name}")
            report = check_device(args.name, inventory=args.inventory, opts=connection_options(args))
    if args.json:
        from ..device.link.health import HealthStore

        state = HealthStore(load_inventory(args.inventory).path).get(args.name)
        print(json.dumps({**report, "health": state or None}, indent=2))
    else:
        print_check(report)
    if not report["matches"]:
        failed = [f"{c['check']} ({c['detail']})" for c in report["checks"] if c["required"] and not c["ok"]]
        raise Misconfigured(args.name, f"does not match target {report['target']}: {'; '.join(failed)}")
    from ..device.link.health import HealthStore

    store = HealthStore(load_inventory(args.inventory).path)
    if store.clear(args.name) and not args.json:
        console().print(f"cleared the unhealthy mark on {escape(args.name)} in {escape(store.path)}")
    return ExitCode.OK


def cmd_setup(name: str, inventory, args) -> int:
    """``devices setup NAME``: the target's runtime installed on the device."""
    from ..device.provision.setup import setup_device

    with step_progress(getattr(args, "quiet", False)) as on_step:
        res = setup_device(name, inventory=inventory, packages=args.package,
                           update_inventory=not args.keep_inventory, on_step=on_step,
                           opts=connection_options(args))
    asked = {r.split("=")[0].split("<")[0].split(">")[0].lower() for r in res.packages}
    main = [w["name"].split("-")[:2] for w in res.wheels if w["name"].split("-")[0].lower() in asked]
    deps = len(res.wheels) - len(main)
    t = res.seconds
    say_wrapped(f"{res.device}: {'already had' if res.reused else 'installed'} {', '.join(' '.join(m) for m in main)}"
                + (f" and {deps} dependencies" if deps else "")
                + f" for {res.platform[0]}, Python {res.python_version} in {sum(t.values()):.0f} s "
                  f"(download {t.get('download', 0):.0f} s, upload {t.get('upload', 0):.0f} s, "
                  f"install {t.get('install', 0):.0f} s)")
    say_wrapped(f"env python {res.python}" + ("; devices.toml points there now" if res.inventory_updated else ""), "  ")
    for note in res.notes:
        say_wrapped(f"note: {note}", "  ")
    return ExitCode.OK


def print_devices(inv) -> None:
    from rich.table import Table

    from ..device.link.health import HealthStore

    state = HealthStore(inv.path).read()
    t = Table(title=escape(f"devices in {inv.path}"), title_justify="left")
    rows = []
    for name in inv.names():
        d = inv.devices[name]
        e = state.get(name) or {}
        n = int(e.get("consecutive_failures") or 0)
        health = ("unhealthy" if e.get("unhealthy") else f"{n} failure(s)" if n else "ok")
        web = d.transport == "browser"
        rows.append({"device": name, "address": "browser (this host)" if web else d.address, "target": d.target,
                     "python": "-" if web else d.python, "workdir": "-" if web else d.workdir,
                     "tags": ", ".join(d.tags), "health": health})
    cols = ["device", "address", "target", "python", "workdir", "tags", "health"]
    con = console()
    # columns by width: the address keeps its port; python and workdir only where they fit
    for drop in ("python", "workdir"):
        if table_width([[c, *(r[c] for r in rows)] for c in cols]) > con.width:
            cols.remove(drop)
    for col in cols:
        t.add_column(col, no_wrap=col in ("device", "address", "target", "health"), overflow="fold")
    colour = {"unhealthy": "red", "ok": ""}
    for r in rows:
        c = colour.get(r["health"], "yellow")
        t.add_row(*[escape(r[col]) if col != "health" or not c else f"[{c}]{escape(r[col])}[/{c}]"
                    for col in cols])
    con.print(t)
    if len(cols) < 7:
        con.print("python and workdir: `edgeforge devices --json` (or a wider terminal)", markup=False)


def _lab_json(inv, state: dict) -> dict:
    from ..lab.status import lab_status

    lab = inv.lab
    doc = {"coordinator": lab.coordinator, "where": lab.where, "notes": lab.notes,
           "error": lab.error.one_line() if lab.error else None, "places": []}
    if lab.error is None:
        doc["places"] = [{**p.to_dict(), "health": state.get(p.name)} for p in lab_status(lab, set(inv.devices))]
    return doc


def _health(entry: dict | None) -> str:
    e = entry or {}
    n = int(e.get("consecutive_failures") or 0)
    return "unhealthy" if e.get("unhealthy") else f"{n} failure(s)" if n else "ok"


def print_lab(inv) -> None:
    """The lab's places: tags, who acquired each, reservations waiting, edgeforge's health.
    A coordinator that does not answer is the verb's error (exit 4), after the static devices."""
    from rich.table import Table

    from ..device.link.health import HealthStore
    from ..lab.status import lab_status

    lab, con = inv.lab, console()
    places = lab_status(lab, set(inv.devices))
    state = HealthStore(inv.path).read()
    where = " ".join(f"{k}={v}" for k, v in lab.where.items())
    t = Table(title=escape(f"labgrid places at {lab.coordinator}" + (f" ({where})" if where else "")),
              title_justify="left")
    for col in ("place", "tags", "acquired by", "waiting", "health"):
        t.add_column(col, overflow="fold", no_wrap=col in ("waiting", "health"))
    for p in places:
        held = p.acquired or (f"reserved {p.reservation}" if p.reservation else "-")
        health = _health(state.get(p.name)) if p.device else "not a device"
        t.add_row(escape(p.name), escape(", ".join(f"{k}={v}" for k, v in sorted(p.tags.items()))),
                  escape(held), str(len(p.waiting)), escape(health))
    con.print(t)
    for p in places:
        for w in p.waiting:
            con.print(f"waiting for {p.name}: {w}", markup=False)
    for note in lab.notes:
        con.print(f"note: {note}", style="yellow", markup=False)


def print_check(report: dict) -> None:
    from rich.table import Table

    con = console()
    fp = report["fingerprint"]
    head = f"({report['address']}), target {report['target']}"
    con.print(f"[bold]{escape(report['device'])}[/bold] {escape(head)}")
    f = Table(show_header=False, box=None, padding=(0, 2))
    f.add_column(style="bold")
    f.add_column(overflow="fold")
    f.add_row("cpu", escape(f"{fp.get('cpu_model')} ({fp.get('cores')} cores, {fp.get('arch')})"))
    f.add_row("kernel", escape(f"{fp.get('os')} {fp.get('kernel')}"))
    f.add_row("governor", escape(fp.get("governor") or "-"))
    f.add_row("temperature", fmt.num(fp.get("temp_c"), ".1f", " °C") if fp.get("temp_c") is not None else "-")
    f.add_row("load", escape(fp.get("load_avg")))
    f.add_row("memory", f"{fmt.num(fp.get('mem_available_mb'), '.0f')} of {fmt.num(fp.get('mem_total_mb'), '.0f')} MB free")
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
