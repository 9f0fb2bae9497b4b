"""--max-accuracy-drop is the INT8 budget on the verbs that build (build, run, sweep) and the
accuracy gate on the verbs that only measure (bench, deploy, gate); --gate-accuracy-drop is the
gate everywhere a gate is taken. One flag never feeds both (no paddle, no device)."""
from __future__ import annotations

import json

import pytest
from result_factory import make_result

from edgeforge.cli import main
from edgeforge.cli._common import bench_options, build_options, gate_options
from edgeforge.cli.main import build_parser

RUN = ["run", "proj", "--target", "linux-x86", "--device", "local"]
SWEEP = ["sweep", "proj", "--target", "linux-x86", "--device", "local"]


def parse(argv):
    return build_parser().parse_args(argv)


@pytest.mark.parametrize("verb", [RUN, SWEEP], ids=["run", "sweep"])
def test_on_verbs_that_build_max_accuracy_drop_is_the_budget_and_no_gate(verb):
    args = parse([*verb, "--max-accuracy-drop", "3"])
    assert build_options(args).max_accuracy_drop == 3.0
    g = gate_options(args)
    assert g.thresholds.max_accuracy_drop is None and not g.requested


@pytest.mark.parametrize("verb", [RUN, SWEEP], ids=["run", "sweep"])
def test_on_verbs_that_build_the_gate_leaves_the_budget_alone(verb):
    args = parse([*verb, "--gate-accuracy-drop", "2"])
    assert gate_options(args).thresholds.max_accuracy_drop == 2.0
    assert build_options(args).max_accuracy_drop is None       # the target's budget
    both = parse([*verb, "--gate-accuracy-drop", "2", "--max-accuracy-drop", "0.5"])
    assert gate_options(both).thresholds.max_accuracy_drop == 2.0 and build_options(both).max_accuracy_drop == 0.5


@pytest.mark.parametrize("spelling", ["--max-accuracy-drop", "--gate-accuracy-drop"])
@pytest.mark.parametrize("verb", [["bench", "b", "--device", "local"], ["deploy", "b", "--device", "local"],
                                  ["gate", "results"]], ids=["bench", "deploy", "gate"])
def test_on_verbs_that_only_measure_both_spellings_are_the_gate(verb, spelling):
    args = parse([*verb, spelling, "1.5"])
    assert gate_options(args).thresholds.max_accuracy_drop == 1.5
    if verb[0] != "gate":
        bench_options(args)                                     # nothing of a build there


def test_build_takes_no_gate(capsys):
    assert main(["build", "proj", "--target", "linux-x86", "--gate-accuracy-drop", "1"]) == 2
    assert "unrecognized arguments: --gate-accuracy-drop" in capsys.readouterr().err
    assert build_options(parse(["build", "proj", "--target", "linux-x86",
                                "--max-accuracy-drop", "4"])).max_accuracy_drop == 4.0


def test_gate_verb_fails_on_the_new_spelling(tmp_path, capsys):
    d = tmp_path / "results"
    d.mkdir()
    (d / "r.json").write_text(json.dumps(make_result(precision="int8", accuracy_drop=1.7)))
    assert main(["gate", str(d), "--gate-accuracy-drop", "1"]) == 1
    assert "max_accuracy_drop" in capsys.readouterr().out
    assert main(["gate", str(d), "--gate-accuracy-drop", "2"]) == 0
    assert main(["gate", str(d), "--max-accuracy-drop", "1"]) == 1


def test_help_says_which_is_which(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--gate-accuracy-drop" in text and "INT8 budget" in text
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--max-accuracy-drop POINTS the same gate, by its old name" in text
