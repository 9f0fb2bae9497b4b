"""issue 19: `--help` of every verb (and sub-verb) has a description and help text for every
option and argument. Walks the real parser, then prints each verb's help at 80 columns."""
from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from edgeforge.cli.main import build_parser, main


def _verbs(parser, prefix=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _verbs(sub, (*prefix, name))


VERBS = list(_verbs(build_parser()))


def test_there_are_verbs_to_walk():
    names = {" ".join(v) for v, _ in VERBS}
    assert {"build", "bench", "run", "sweep", "deploy", "devices", "report", "gate", "toolchain install"} <= names


@pytest.mark.parametrize("verb,parser", VERBS, ids=[" ".join(v) for v, _ in VERBS])
def test_every_verb_has_a_description_and_help_for_every_option(verb, parser):
    assert parser.description and parser.description.strip(), f"`edgeforge {' '.join(verb)}` has no description"
    missing = [a.option_strings or [a.dest] for a in parser._actions
               if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
               and a.help != argparse.SUPPRESS and not (a.help or "").strip()]
    assert missing == [], f"`edgeforge {' '.join(verb)}`: no help for {missing}"


@pytest.mark.parametrize("verb", [v for v, _ in VERBS], ids=[" ".join(v) for v, _ in VERBS])
def test_help_prints_and_exits_0(verb, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exc:
        main([*verb, "--help"])
    assert exc.value.code == 0
    assert out.getvalue().startswith("usage: edgeforge " + " ".join(verb))
