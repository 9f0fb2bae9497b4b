"""The edgeforge command line: the verb list and the one place that maps errors to exit codes.

Each module in ``VERBS`` exposes ``register(sub)``, which adds its verbs to the subparsers
``sub``; to add a verb family, write ``edgeforge/cli/<family>.py`` and list it here. The
modules are imported plainly: a broken one fails every command loudly, it never vanishes.

Exit codes (:class:`edgeforge.errors.ExitCode`): 0 ok, 1 a quality gate failed, 2 usage or
configuration, 3 a build pass failed, 4 a device failed, 70 an internal error (a bug in
edgeforge, not in the input: re-run with --debug and report it), 130 interrupted: SIGINT
(Ctrl-C), SIGTERM (``timeout``, a CI cancel, systemd) and SIGHUP alike. SIGTERM and SIGHUP take
KeyboardInterrupt's path (:class:`edgeforge.errors.Stopped`), so cleanup runs and one line is
printed; during a device run :mod:`edgeforge.device.link.interrupt` handles all three.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import traceback

from ..errors import EdgeforgeError, ExitCode, Stopped, signal_name
from ..stop_signals import keep_handlers
from . import _help, bench, build, deploy, devices, doctor, init, load, profile, report, toolchain
from ._common import Parser
from ._project import resolve_args

VERBS = (init, build, deploy, bench, devices, load, profile, report, toolchain, doctor)


def build_parser() -> Parser:
    p = Parser(prog="edgeforge",
               description="Compile trained Paddle models for edge devices, bench them there.")
    p.set_defaults(debug=False)
    sub = p.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    sub.required = True
    for module in VERBS:
        module.register(sub)
    _help.complete(p)
    return p


def exit_code(exc: BaseException) -> ExitCode:
    """The one error -> exit-code map."""
    if isinstance(exc, EdgeforgeError):
        return ExitCode(exc.exit_code)
    if isinstance(exc, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    return ExitCode.INTERNAL


def _message(exc: BaseException) -> str:
    if isinstance(exc, EdgeforgeError):
        return exc.one_line()
    if isinstance(exc, Stopped):
        return f"interrupted ({signal_name(exc.signum)})"
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted (SIGINT, Ctrl-C)"
    first = str(exc).splitlines()[0] if str(exc) else ""
    return (f"internal error {type(exc).__name__}: {first} "
            "(re-run with --debug and report it)")


def _raise_stopped(signum, frame):
    raise Stopped(signum)


def stop_signals_raise() -> dict:
    """SIGTERM and SIGHUP raise :class:`Stopped` (a KeyboardInterrupt) in the main thread, as
    SIGINT does; one the process ignores (``nohup``) stays ignored. Returns the old handlers."""
    old = {}
    if threading.current_thread() is not threading.main_thread():
        return old
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
            old[sig] = signal.signal(sig, _raise_stopped)
    keep_handlers()             # ... after `import paddle` too (edgeforge.stop_signals)
    return old


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("EDGEFORGE_DEBUG") == "1"
    old = stop_signals_raise()
    try:
        args = build_parser().parse_args(argv)
        resolve_args(args)
        code = int(args.func(args))
        sys.stdout.flush()              # a closed pipe shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        # the reader went away (`edgeforge targets | head`): not an error of ours, and nothing
        # more can be printed; stdout is pointed at /dev/null so the interpreter's flush is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - mapped, one line
        if debug and not isinstance(exc, KeyboardInterrupt):
            traceback.print_exc()
        print(f"error: {_message(exc)}", file=sys.stderr)
        return int(exit_code(exc))
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
