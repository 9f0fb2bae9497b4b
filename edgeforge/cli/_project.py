"""The project and target arguments every build verb shares, resolved once after parsing.

``project`` is optional: without it the verb uses the current directory or the nearest parent
holding an edgeforge.toml (like git and cargo), and says which when it is not ``.``.
``--target`` may name a family (jetson, rpi, android, linux): the family's default profile is
built, and one line says which and what else the family holds. A PIR program on a target whose
default backend is Paddle Lite and which offers ONNX is built through ONNX, and one line says so.
"""
from __future__ import annotations

import sys
from pathlib import Path

PROJECT_HELP = ("the project directory (holds edgeforge.toml; default: the current directory "
                "or the nearest parent with one)")


def add_project_arg(p) -> None:
    p.add_argument("project", nargs="?", default=None, help=PROJECT_HELP)


def resolve_args(args) -> None:
    """Fill ``args.project`` when omitted and turn a family ``args.target`` into its profile,
    printing one line on stderr for each choice the user did not spell out."""
    if hasattr(args, "project") and getattr(args, "project", "") is None:
        from ..project import find_project

        root = find_project()
        if root != Path.cwd().resolve():
            print(f"project: {root}", file=sys.stderr)
        args.project = str(root)
    target = getattr(args, "target", None)
    if isinstance(target, str) and target:
        from ..targets import resolve_target

        args.target, note = resolve_target(target)
        if note:
            print(note, file=sys.stderr)
        _backend_note(args)


def _backend_note(args) -> None:
    """One line when edgeforge picks the backend for the input (a PIR program on a Lite target
    that offers ONNX: ``options.resolve_backend``); the build itself makes the same choice."""
    from ..errors import EdgeforgeError

    if getattr(args, "backend", "") is not None or not getattr(args, "project", None):
        return
    try:
        from ..options import resolve_backend
        from ..project import load_project
        from ..targets import load_target

        note = resolve_backend(load_target(args.target), None, load_project(args.project))[1]
    except EdgeforgeError:
        return                  # the verb reports a bad project or target itself, in one line
    if note:
        print(note, file=sys.stderr)
