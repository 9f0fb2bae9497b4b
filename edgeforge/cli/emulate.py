"""``devices emulate start|stop`` and ``devices setup NAME``: an emulated aarch64 device, a runtime.

    edgeforge devices emulate start --dir DIR [--cpu cortex-a72|cortex-a76] [--target rpi4] [--port N]
    edgeforge devices emulate stop --dir DIR [--purge]
    edgeforge devices setup NAME [--inventory FILE] [--package REQ]...

The ``devices`` verb (cli/devices.py) owns the parser; it calls :func:`add_arguments` and, for the
actions in :data:`ACTIONS`, :func:`run`.
"""
from __future__ import annotations

from ..errors import ConfigError, ExitCode
from ._common import console, escape, positive_int, step_progress

ACTIONS = ("emulate", "setup")


def add_arguments(p) -> None:
    g = p.add_argument_group("emulate / setup")
    g.add_argument("--dir", metavar="DIR", help="emulate: where the emulated device lives (rootfs, keys, "
                                                 "devices.toml)")
    g.add_argument("--cpu", metavar="MODEL", help="emulate start: QEMU CPU model, e.g. cortex-a72 (Pi 4), "
                                                   "cortex-a76 (Pi 5); default from --target")
    g.add_argument("--target", default="rpi4", metavar="NAME", help="emulate start: the device's target")
    g.add_argument("--port", type=positive_int, metavar="N", help="emulate start: sshd port (default: a free one)")
    g.add_argument("--setup", action="store_true", help="emulate start: then run `devices setup` on it")
    g.add_argument("--purge", action="store_true", help="emulate stop: delete the unpacked rootfs too")
    g.add_argument("--package", action="append", metavar="REQ",
                   help="setup: a pip requirement instead of the target's runtime (repeatable)")
    g.add_argument("--keep-inventory", action="store_true",
                   help="setup: do not point the device's python in devices.toml at the new env")


def run(args) -> int:
    if args.action == "setup":
        if not args.name:
            raise ConfigError("`edgeforge devices setup` needs a device name")
        return _setup(args.name, args.inventory, args)
    if args.name not in ("start", "stop"):
        raise ConfigError("`edgeforge devices emulate` needs start or stop",
                          hint="edgeforge devices emulate start --dir DIR")
    if not args.dir:
        raise ConfigError(f"`edgeforge devices emulate {args.name}` needs --dir DIR")
    from ..device.emulate import Emulator

    emu = Emulator(args.dir, cpu=args.cpu, target=args.target, port=args.port)
    if args.name == "stop":
        out = emu.stop(purge=args.purge)
        console().print(escape(f"stopped the emulated device in {emu.root}: {len(out['killed'])} process(es) "
                               f"ended, {len(out['unmounted'])} mount(s) undone"
                               + (", rootfs deleted" if out["purged"] else "")))
        return ExitCode.OK
    state = emu.start()
    con = console()
    t = state.timings or {}
    built = " ".join(f"{k[6:]} {v:.0f}s" for k, v in t.items() if k.startswith("build_"))
    con.print(escape(f"emulated device {emu.name}: aarch64 under qemu-user ({state.cpu}), "
                     f"target {state.target}, 127.0.0.1:{state.port}"))
    con.print(escape(f"  rootfs {'built: ' + built if built else 'from the cache'}; unpacked "
                     f"{t.get('unpack', 0):.0f}s; sshd up {t.get('sshd', 0):.0f}s"))
    con.print(escape(f"  inventory {emu.inventory}"))
    con.print("  its timings are not performance figures; its numerics are aarch64's")
    if args.setup:
        return _setup(emu.name, str(emu.inventory), args)
    con.print(escape(f"  next: edgeforge devices setup {emu.name} --inventory {emu.inventory}"))
    return ExitCode.OK


def _setup(name: str, inventory, args) -> int:
    from ..device.setup import setup_device

    with step_progress(getattr(args, "quiet", False)) as on_step:
        res = setup_device(name, inventory=inventory, packages=args.package,
                           update_inventory=not args.keep_inventory, on_step=on_step)
    con = console()
    names = ", ".join(w["name"].split("-")[0] + " " + w["name"].split("-")[1] for w in res.wheels)
    con.print(escape(f"{res.device}: installed {len(res.wheels)} wheel(s) for {res.platform[0]}, "
                     f"Python {res.python_version}: {names}"))
    con.print(escape(f"  env python {res.python}"
                     + ("; devices.toml updated" if res.inventory_updated else "")))
    for note in res.notes:
        con.print(escape(f"  note: {note}"))
    return ExitCode.OK
