"""The ``doctor`` verb.

    edgeforge doctor [--target T]                      # ok/missing per item, with the fix
"""
from __future__ import annotations

from ..errors import ConfigError, ExitCode


def register(sub) -> None:
    d = sub.add_parser("doctor", help="check this machine: what is present, what is missing, how to fix it")
    d.add_argument("--target", metavar="T", help="exit 2 unless everything T's build needs is present")
    d.set_defaults(func=cmd_doctor)


def cmd_doctor(args) -> int:
    from ..doctor import diagnose, render

    items, needed = diagnose(args.target)
    lines, ready = render(items, needed, args.target)
    if not ready:       # the summary line is the error: exit 2 from the one error map
        print("\n".join(lines[:-1]))
        raise ConfigError(lines[-1], hint="the fixes are listed above")
    print("\n".join(lines))
    return ExitCode.OK
