"""Help text the verbs share, filled in once after every verb has registered.

``complete(parser)`` gives each verb without a description its one-line ``help`` as the
description, and each argument without help the text below: by verb and name first, then by
name alone (the options several verbs take mean the same everywhere). A verb's own help text
always wins. tests/unit/test_cli_help.py walks the parser: nothing is left without help.
"""
from __future__ import annotations

import argparse

COMMON = {
    "project": "the project directory (holds edgeforge.toml)",
    "build_dir": "a build directory written by `edgeforge build` (holds manifest.json)",
    "--target": "a target profile, or a family (jetson, rpi, android, linux) for its default "
                "(`edgeforge targets` lists them)",
    "--backend": "lite or onnx (default: the target's default backend)",
    "--precision": "int8, fp16 or fp32 (default: the target's precision for the backend)",
    "--no-cache": "rebuild every pass instead of reusing cached outputs",
    "--quiet": "no progress lines on stderr (errors still print)",
    "--json": "print JSON instead of a table",
    "--connect-timeout": "seconds to wait for the SSH connection (default: the target's)",
    "--timeout": "seconds the remote command may run (default: the target's)",
    "--device": "one device by name from the inventory",
}
BY_VERB = {
    ("targets", "action"): "list (default) or show",
    ("targets", "name"): "the target to show",
    ("cache", "action"): "info (default: where the cache is, how many entries) or clear",
    ("devices", "action"): "list (default), check NAME, or an emulated-device action",
    ("devices", "name"): "the device to check (a name in the inventory)",
    ("rollback", "name"): "the release name (as given to `deploy --as`, default the model name)",
    ("releases", "name"): "the release name (as given to `deploy --as`, default the model name)",
}


def _subparsers(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name)


def _key(action: argparse.Action) -> str:
    longs = [o for o in action.option_strings if o.startswith("--")]
    return longs[0] if longs else (action.option_strings[0] if action.option_strings else action.dest)


def complete(parser: argparse.ArgumentParser, verb: str = "") -> None:
    """Fill missing descriptions and argument help in ``parser`` and its subparsers."""
    for name, sub, help_ in _subparsers(parser):
        if not sub.description and help_:
            sub.description = help_[0].upper() + help_[1:] + "."
        for action in sub._actions:
            if action.help is None and not isinstance(action, argparse._SubParsersAction):
                key = _key(action)
                action.help = BY_VERB.get((name, key)) or COMMON.get(key)
        complete(sub, name)
