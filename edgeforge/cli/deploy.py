"""The release verbs: ``deploy``, ``rollback``, ``releases``.

    edgeforge deploy BUILD_DIR (--device D | --devices TAG|all) [--as NAME] [--keep N]
                     [--canary K] [--reason TEXT] [bench flags] [gate flags]
    edgeforge rollback NAME (--device D | --devices TAG) [--to ID] [--reason TEXT]
    edgeforge releases NAME --device D [--json]
"""
from __future__ import annotations

import argparse
import json

from ..errors import ConfigError, DeviceError, ExitCode, FleetFailed
from ._common import (
    EXIT_CODES_HELP,
    add_bench_flags,
    add_connection_flags,
    bench_options,
    check_gate_flags,
    connection_options,
    console,
    escape,
    gate_options,
    nonneg_int,
    positive_int,
    wrap,
)
from ._render import fleet_progress

LAYOUT_HELP = """on the device, per release name:
  <workdir>/deploy/<NAME>/current -> releases/<id>   (the live one)
  <workdir>/deploy/<NAME>/releases/<id>/             artifact, manifest.json,
      reference/, edgeforge_runner-<sha12>.pyz, release.json
  <workdir>/deploy/<NAME>/history.jsonl              one line per switch
"""

EXIT_HELP = """exit codes: 0 ok; 1 a smoke test or canary gate failed (not switched in, or
switched back); 2 usage or configuration (also: NAME holds another model, see
--replace-model); 4 a device failed (unreachable, lost, busy, health check
failed and switched back, switched but health unchecked, current unknown);
70 an internal error; 130 interrupted (SIGINT, SIGTERM or SIGHUP: each device
stops at its next step, is read back, and the record says what it has).
With several devices the others go on; 130 wins, then 4, 2, 1.
"""


def _selection(p, required_one: bool = True) -> None:
    p.add_argument("--device", metavar="NAME", help="one device by name")
    p.add_argument("--devices", metavar="SEL", help="devices by tag or name (comma-separated), or 'all'")


def register(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    d = sub.add_parser(
        "deploy", help="install a build on devices as a release and switch to it atomically",
        description=wrap("Uploads BUILD_DIR by digest as a new release of NAME, smoke-tests it on the device "
                         "(the reference inputs, drift within the build's budget), switches <NAME>/current "
                         "to it with one rename, health-checks it through current (switching back on "
                         "failure), and prunes old releases. --canary K: the first K devices first, benched "
                         "with the gate flags; the rest follow only when they pass."),
        epilog=LAYOUT_HELP + "\n" + EXIT_HELP, formatter_class=fmt)
    d.add_argument("build_dir", metavar="BUILD_DIR")
    _selection(d)
    d.add_argument("--as", dest="name", metavar="NAME", help="release name (default: the build's model name)")
    d.add_argument("--keep", type=positive_int, default=5, metavar="N",
                   help="releases kept per device (default 5; current and the one before always stay)")
    d.add_argument("--canary", type=nonneg_int, default=0, metavar="K",
                   help="deploy to K devices first and bench them with the gate flags")
    d.add_argument("--reason", metavar="TEXT", help="recorded in history.jsonl")
    d.add_argument("--replace-model", action="store_true",
                   help="deploy even when NAME holds another model (the build's name differs)")
    d.add_argument("--jobs", type=positive_int, metavar="N", help="devices deployed at once")
    add_bench_flags(d, device=False)
    d.set_defaults(func=cmd_deploy)

    r = sub.add_parser("rollback", help="switch a release name back to the release before, or to --to ID",
                       epilog=LAYOUT_HELP + "\n" + EXIT_HELP, formatter_class=fmt)
    r.add_argument("name", metavar="NAME")
    _selection(r)
    r.add_argument("--to", metavar="ID", help="the release to switch to (default: the one before current)")
    r.add_argument("--reason", metavar="TEXT", help="recorded in history.jsonl")
    r.add_argument("--results", metavar="DIR",
                   help="where the rollback record goes (default: $EDGEFORGE_RESULTS or ./results)")
    _link_flags(r)
    r.set_defaults(func=cmd_rollback)

    s = sub.add_parser("releases", help="list the releases of NAME on a device, with its history",
                       epilog=LAYOUT_HELP + "\n" + EXIT_CODES_HELP, formatter_class=fmt)
    s.add_argument("name", metavar="NAME")
    s.add_argument("--device", required=True, metavar="NAME")
    s.add_argument("--history", type=positive_int, default=20, metavar="N", help="history lines shown (default 20)")
    _link_flags(s, wait=False)
    s.set_defaults(func=cmd_releases)


def _link_flags(p, wait: bool = True) -> None:
    add_connection_flags(p, lease=wait)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--quiet", "-q", action="store_true")


def _selector(args) -> str:
    if args.device and args.devices:
        raise ConfigError("give --device NAME or --devices TAG|NAME|all, not both")
    if not (args.device or args.devices):
        raise ConfigError(f"{args.command} needs --device NAME or --devices TAG|NAME|all")
    return args.device or args.devices


# ---------------------------------------------------------------- commands

def cmd_deploy(args) -> int:
    from ..device.release.deploy import DeploySpec, deploy

    check_gate_flags(args)
    selector = _selector(args)
    results_dir = _results_dir(args)
    gates = gate_options(args).thresholds.asked()
    if gates and args.force:
        gates["force"] = True
    with fleet_progress(args.quiet) as on_step:
        spec = DeploySpec(name=args.name, keep=args.keep, canary=args.canary, gates=gates, reason=args.reason,
                          jobs=args.jobs, replace_model=args.replace_model)
        record = deploy(args.build_dir, selector, bench_options(args), spec, on_step=on_step)
    if args.junit:
        from pathlib import Path

        from ..report.gates import GateResult
        from ..report.junit import write_junit

        write_junit([GateResult(**g) for e in record.devices for g in e.gates], Path(args.junit))
    return _finish(args, record, results_dir)


def cmd_rollback(args) -> int:
    from ..device.release.deploy import rollback

    selector = _selector(args)
    results_dir = _results_dir(args)
    with fleet_progress(args.quiet) as on_step:
        record = rollback(args.name, selector, connection_options(args), to=args.to, reason=args.reason, on_step=on_step)
    return _finish(args, record, results_dir)


def _results_dir(args):
    """Where the deploy record goes (--results, $EDGEFORGE_RESULTS, results/), checked before
    anything runs on a device."""
    from ..device.link.settings import check_results_dir, results_dir_of
    from ..options import BenchOptions

    d = results_dir_of(BenchOptions.of(results_dir=args.results))
    check_results_dir(d, create=False)
    return d


def _finish(args, record, results_dir) -> int:
    from ..results.deploy import write_record

    path = write_record(results_dir, record)
    if args.json:
        print(json.dumps(record.to_json(), indent=2))
    else:
        print_record(record)
        if not args.quiet:
            console().print(f"record: {path}", markup=False, soft_wrap=True)
    failed = [e for e in record.devices if e.exit_code]
    if len(record.devices) == 1 and failed:
        e = failed[0]
        raise FleetFailed(f"device {e.device}: {e.error}", hint=e.hint, exit_code=record.exit_code)
    if failed:
        raise FleetFailed(f"{len(failed)} of {len(record.devices)} devices: "
                          + "; ".join(f"{e.device} {e.status}" + (f" ({e.error})" if e.error else "") for e in failed),
                          exit_code=record.exit_code)
    return ExitCode.OK


def cmd_releases(args) -> int:
    from ..device.release.deploy import list_releases

    dev, st = list_releases(args.name, args.device, connection_options(args))
    if args.json:
        print(json.dumps({"schema": "edgeforge.releases/1", "device": dev.name, "name": args.name,
                          **st.to_dict()}, indent=2))
    else:
        print_releases(dev.name, args.name, st, args.history)
    if st.record_note and not args.json:
        console().print(f"note: {st.record_note}", markup=False, soft_wrap=True)
    if st.broken:
        raise DeviceError(dev.name, st.broken)
    return ExitCode.OK


# ---------------------------------------------------------------- rendering

STYLE = {"deployed": "green", "rolled back": "green", "unchanged": "green", "reverted": "yellow",
         "not deployed": "yellow", "skipped": "yellow", "interrupted": "yellow"}


def print_record(record) -> None:
    from rich.table import Table

    t = Table(title=escape(f"{record.action} {record.name} ({record.id})"), title_justify="left")
    for col in ("device", "role", "status", "current", "note / cause"):
        t.add_column(col, overflow="fold")
    for e in record.devices:
        note = e.error or "; ".join(e.notes) or (f"from {e.from_ or 'none'}" if e.to else "")
        if e.error and e.notes:
            note = f"{note}; {'; '.join(e.notes)}"
        t.add_row(escape(e.device), e.role, f"[{STYLE.get(e.status, 'red')}]{escape(e.status)}[/]",
                  escape(e.current or "-"), escape(note))
    con = console()
    con.print(t)
    for n in record.notes:
        con.print(f"note: {n}", markup=False)


def print_releases(device: str, name: str, st, shown: int) -> None:
    from rich.table import Table

    con = console()
    t = Table(title=escape(f"releases of {name} on {device}"), title_justify="left")
    for col in ("", "release", "sha256", "state"):
        t.add_column(col, overflow="fold")
    for r in reversed(st.releases):
        mark = "*" if r["id"] == st.current else ""
        state = ("current" if mark else "previous" if r["id"] == st.previous else "") if r["sealed"] else "incomplete"
        t.add_row(mark, escape(r["id"]), escape((r.get("digest") or "-")[:12]), state)
    con.print(t)
    if st.current is None:
        con.print("current: none", markup=False)
    con.print(f"history (last {min(shown, len(st.history))} of the switches read):", markup=False)
    for line in st.history[-shown:]:
        con.print(f"  {line.get('time', '?')}  {line.get('action', '?')} by {line.get('user')}@{line.get('host')}: "
                  f"{line.get('reason', '')}", markup=False)
        con.print(f"      {line.get('from') or 'none'}{' (missing)' if line.get('from_missing') else ''}"
                  f" -> {line.get('to') or 'none'}", markup=False)
