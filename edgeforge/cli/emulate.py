"""``devices emulate start|stop`` and ``devices setup NAME``: an emulated aarch64 device, a runtime.

    edgeforge devices emulate start --dir DIR [--cpu cortex-a72|cortex-a76] [--target rpi4] [--port N]
    edgeforge devices emulate stop --dir DIR [--purge]
    edgeforge devices setup NAME [--inventory FILE] [--package REQ]... [--connect-timeout S]
        [--timeout S] [--wait S] [--retries N] [--trust-new-host]

The ``devices`` verb (cli/devices.py) owns the parser; it calls :func:`add_arguments` and, for the
actions in :data:`ACTIONS`, :func:`run`.
"""
from __future__ import annotations

from ..errors import ConfigError, ExitCode
from ._common import connection_options, console, escape, number
from ._render import step_progress

ACTIONS = ("emulate", "setup")


def add_arguments(p) -> None:
    g = p.add_argument_group("emulate / setup")
    g.add_argument("--dir", metavar="DIR", help="emulate: where the emulated device lives (rootfs, keys, "
                                                 "devices.toml)")
    g.add_argument("--cpu", metavar="MODEL", help="emulate start: QEMU CPU model, e.g. cortex-a72 (Pi 4), "
                                                   "cortex-a76 (Pi 5); default from --target")
    g.add_argument("--target", default="rpi4", metavar="NAME", help="emulate start: the device's target")
    g.add_argument("--port", type=number(int, "a TCP port", at_most=65535), metavar="N", help="emulate start: sshd port (default: a free one)")
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
        _say(f"stopped the emulated device in {emu.root}: {len(out['killed'])} process(es) "
             f"ended, {len(out['unmounted'])} mount(s) undone" + (", rootfs deleted" if out["purged"] else ""))
        return ExitCode.OK
    state = emu.start()
    t = state.timings or {}
    built = " ".join(f"{k[6:]} {v:.0f}s" for k, v in t.items() if k.startswith("build_"))
    _say(f"emulated device {emu.name}: aarch64 under qemu-user ({state.cpu}), "
         f"target {state.target}, 127.0.0.1:{state.port}")
    _say(f"rootfs {'built: ' + built if built else 'from the cache'}; unpacked "
         f"{t.get('unpack', 0):.0f}s; sshd up {t.get('sshd', 0):.0f}s", "  ")
    _say(f"inventory {emu.inventory}", "  ")
    _say("its timings are not performance figures; its numerics are aarch64's", "  ")
    if args.setup:
        return _setup(emu.name, str(emu.inventory), args)
    _say(f"next: edgeforge devices setup {emu.name} --inventory {emu.inventory}", "  ")
    return ExitCode.OK


def _say(text: str, indent: str = "") -> None:
    """One message, wrapped at 80 columns (continuation lines indented under it)."""
    import textwrap

    lines = textwrap.wrap(text, 80, initial_indent=indent, subsequent_indent=indent + "  ",
                          break_on_hyphens=False, break_long_words=False)
    console().print(escape("\n".join(lines)))


def _setup(name: str, inventory, args) -> int:
    from ..device.setup import setup_device

    with step_progress(getattr(args, "quiet", False)) as on_step:
        res = setup_device(name, inventory=inventory, packages=args.package,
                           update_inventory=not args.keep_inventory, on_step=on_step,
                           opts=connection_options(args))
    asked = {r.split("=")[0].split("<")[0].split(">")[0].lower() for r in res.packages}
    main = [w["name"].split("-")[:2] for w in res.wheels if w["name"].split("-")[0].lower() in asked]
    deps = len(res.wheels) - len(main)
    t = res.seconds
    _say(f"{res.device}: {'already had' if res.reused else 'installed'} {', '.join(' '.join(m) for m in main)}"
         + (f" and {deps} dependencies" if deps else "")
         + f" for {res.platform[0]}, Python {res.python_version} in {sum(t.values()):.0f} s "
           f"(download {t.get('download', 0):.0f} s, upload {t.get('upload', 0):.0f} s, "
           f"install {t.get('install', 0):.0f} s)")
    _say(f"env python {res.python}" + ("; devices.toml points there now" if res.inventory_updated else ""), "  ")
    for note in res.notes:
        _say(f"note: {note}", "  ")
    return ExitCode.OK
