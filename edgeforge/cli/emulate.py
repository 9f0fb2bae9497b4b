"""``devices emulate start|stop``: an emulated aarch64 device.

    edgeforge devices emulate start --dir DIR [--cpu cortex-a72|cortex-a76] [--target rpi4] [--port N]
        [--setup]
    edgeforge devices emulate stop --dir DIR [--purge]

The ``devices`` verb (cli/devices.py) owns the parser; it calls :func:`add_arguments` and, for the
actions in :data:`ACTIONS`, :func:`run` (and ``devices setup`` after a start with ``--setup``).
"""
from __future__ import annotations

from ..errors import ConfigError
from ._common import number
from ._render import say_wrapped

ACTIONS = ("emulate",)


def add_arguments(p) -> None:
    g = p.add_argument_group("emulate")
    g.add_argument("--dir", metavar="DIR", help="emulate: where the emulated device lives (rootfs, keys, "
                                                 "devices.toml)")
    g.add_argument("--cpu", metavar="MODEL", help="emulate start: QEMU CPU model, e.g. cortex-a72 (Pi 4), "
                                                   "cortex-a76 (Pi 5); default from --target")
    g.add_argument("--target", default="rpi4", metavar="NAME", help="emulate start: the device's target")
    g.add_argument("--port", type=number(int, "a TCP port", at_most=65535), metavar="N", help="emulate start: sshd port (default: a free one)")
    g.add_argument("--setup", action="store_true", help="emulate start: then run `devices setup` on it")
    g.add_argument("--purge", action="store_true", help="emulate stop: delete the unpacked rootfs too")


def run(args) -> tuple[str, str] | None:
    """Start or stop the emulated device; a start returns its (name, inventory) for
    ``--setup``."""
    if args.name not in ("start", "stop"):
        raise ConfigError("`edgeforge devices emulate` needs start or stop",
                          hint="edgeforge devices emulate start --dir DIR")
    if not args.dir:
        raise ConfigError(f"`edgeforge devices emulate {args.name}` needs --dir DIR")
    from ..device.provision.emulate import Emulator

    emu = Emulator(args.dir, cpu=args.cpu, target=args.target, port=args.port)
    if args.name == "stop":
        out = emu.stop(purge=args.purge)
        say_wrapped(f"stopped the emulated device in {emu.root}: {len(out['killed'])} process(es) "
                    f"ended, {len(out['unmounted'])} mount(s) undone" + (", rootfs deleted" if out["purged"] else ""))
        return None
    state = emu.start()
    t = state.timings or {}
    built = " ".join(f"{k[6:]} {v:.0f}s" for k, v in t.items() if k.startswith("build_"))
    say_wrapped(f"emulated device {emu.name}: aarch64 under qemu-user ({state.cpu}), "
                f"target {state.target}, 127.0.0.1:{state.port}")
    say_wrapped(f"rootfs {'built: ' + built if built else 'from the cache'}; unpacked "
                f"{t.get('unpack', 0):.0f}s; sshd up {t.get('sshd', 0):.0f}s", "  ")
    say_wrapped(f"inventory {emu.inventory}", "  ")
    say_wrapped("its timings are not performance figures; its numerics are aarch64's", "  ")
    if not args.setup:
        say_wrapped(f"next: edgeforge devices setup {emu.name} --inventory {emu.inventory}", "  ")
    return emu.name, str(emu.inventory)
