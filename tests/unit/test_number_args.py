"""issue 23: every numeric flag of every verb goes through one argument type, so nan, inf,
negatives, absurdly large values and text are one usage line naming the flag (exit 2) in every
verb; the library (LoadPlan, BenchOptions, GateOptions) refuses the same values when it is
called directly; the host's bounds are the runner's."""
from __future__ import annotations

import argparse
import math

import pytest

from edgeforge.cli.main import build_parser, main
from edgeforge.errors import ConfigError

BAD = ("nan", "inf", "-inf", "-1", "1e30", "9" * 40, "abc", "")


def _numeric_flags():
    """(verb path, flag, action) for every option whose type is not text, in every (sub)verb."""
    out = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
            elif action.option_strings and action.type not in (None, str):
                out.append((path, action.option_strings[-1], action))

    walk(build_parser(), ())
    return out


FLAGS = _numeric_flags()


def test_every_numeric_flag_uses_the_one_argument_type():
    assert len(FLAGS) > 30, FLAGS
    for path, flag, action in FLAGS:
        assert action.type not in (int, float), f"{' '.join(path)} {flag}: a bare {action.type.__name__}"
        owner = action.type.__qualname__.split(".<locals>")[0]
        assert owner in ("number", "numbers"), f"{' '.join(path)} {flag}: type {action.type.__qualname__}"


@pytest.mark.parametrize("path,flag", [(p, f) for p, f, _ in FLAGS], ids=[" ".join((*p, f)) for p, f, _ in FLAGS])
def test_bad_numbers_are_one_usage_line_naming_the_flag(path, flag, capsys):
    capsys.readouterr()
    code = main([*path, flag, "nan"])                 # through the real CLI: what the user sees
    out, err = capsys.readouterr()
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and out == "" and "Traceback" not in err, err
    assert len(errors) == 1 and errors[0].startswith(f"error: argument {flag}: expected "), err
    parser = _PARSER
    signed = flag == "--mean" and path == ("init",)   # a mean may be negative (it is subtracted)
    for bad in BAD if not signed else [b for b in BAD if b != "-1"] + ["-1e4"]:   # the rest, same parser
        with pytest.raises(ConfigError, match=f"argument {flag}: expected "):
            parser.parse_args([*path, f"{flag}={bad}"])


_PARSER = build_parser()


def test_good_numbers_still_parse():
    p = build_parser()
    a = p.parse_args(["load", "B", "--device", "d", "--concurrency", "1,2, 8", "--rate", "0.5,10000",
                      "--duration", "3600", "--warmup", "0", "--slo-p99-ms", "0.25"])
    assert a.concurrency == (1, 2, 8) and a.rate == (0.5, 10000.0) and a.duration == 3600.0
    assert a.warmup == 0.0 and a.slo_p99_ms == 0.25
    a = p.parse_args(["bench", "B", "--device", "d", "--timeout", "1e3", "--retries", "0", "--threads", "256",
                      "--max-p50-ms", "0", "--min-accelerated-nodes", "1"])
    assert (a.timeout, a.retries, a.threads, a.max_p50_ms, a.min_accelerated_nodes) == (1000.0, 0, 256, 0.0, 1.0)
    assert p.parse_args(["sweep", "P", "--target", "t", "--device", "d", "--threads", "1, 2"]).threads == "1,2"


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("field,value,flag", [
    ("duration_s", NAN, "--duration"), ("duration_s", INF, "--duration"), ("duration_s", 1e9, "--duration"),
    ("warmup_s", NAN, "--warmup"), ("warmup_s", -1.0, "--warmup"),
    ("rates", (NAN,), "--rate"), ("rates", (1e9,), "--rate"), ("rates", (INF,), "--rate"),
    ("slo_p99_ms", NAN, "--slo-p99-ms"), ("slo_p99_ms", -INF, "--slo-p99-ms"),
    ("concurrency", (100000,), "--concurrency"), ("concurrency", (True,), "--concurrency"),
    ("batch", (0,), "--batch"), ("threads", (10 ** 11,), "--threads"),
])
def test_the_library_load_plan_refuses_what_the_flags_refuse(field, value, flag):
    from edgeforge.device.measure.load import LoadPlan

    with pytest.raises(ConfigError, match=flag):
        LoadPlan(**{field: value}).checked()


def test_the_open_loop_bounds_arrivals_per_level_not_only_the_rate():
    from edgeforge.device.measure.load import LoadPlan

    LoadPlan(rates=(10000.0,), duration_s=60.0).checked()
    with pytest.raises(ConfigError, match="arrivals"):
        LoadPlan(rates=(10000.0,), duration_s=600.0).checked()


@pytest.mark.parametrize("kw", [{"timeout": math.nan}, {"connect_timeout": math.inf}, {"wait": math.nan},
                                {"wait": -1.0}, {"runs": 10 ** 9}, {"threads": 10 ** 11}, {"retries": 10 ** 6},
                                {"warmups": 10 ** 9}, {"warmups": math.inf}])
def test_bench_options_refuse_non_finite_and_absurd_values(kw):
    from edgeforge.options import BenchOptions

    with pytest.raises(ConfigError):
        BenchOptions.of(**kw)


@pytest.mark.parametrize("name", ["max_accuracy_drop", "max_p50_ms", "min_int8_speedup", "min_accelerated_nodes"])
def test_gate_options_refuse_nan(name):
    from edgeforge.options import GateOptions

    with pytest.raises(ConfigError, match=name):
        GateOptions.of(**{name: math.nan})


def test_the_host_bounds_are_the_runners():
    from edgeforge import options
    from edgeforge.device.measure import load
    from edgeforge.runner.limits import LOAD_MAX_ARRIVALS, LOAD_MAX_RATE, MAX_RUNS, MAX_THREADS

    assert options.MAX_THREADS == MAX_THREADS and options.MAX_COUNT == MAX_RUNS
    assert load.MAX_SLO_MS == 3_600_000.0
    assert LOAD_MAX_RATE * 60 <= LOAD_MAX_ARRIVALS


def test_the_worker_cap_follows_cores_and_memory():
    from edgeforge.runner.limits import LOAD_MAX_WORKERS, load_worker_cap

    assert load_worker_cap("shared", 2, 4096)[0] == 8             # at least 8
    assert load_worker_cap("shared", 16, 65536)[0] == 64          # 4 per core
    assert load_worker_cap("shared", 1000, None)[0] == LOAD_MAX_WORKERS
    assert load_worker_cap("shared", 2, 4096, force=True)[0] == LOAD_MAX_WORKERS
    # own sessions: a process each, ~200 MB plus twice the artifact, within 80 % of the memory
    cap, why = load_worker_cap("own", 4, 1000)
    assert cap == 4 and "1000 MB" in why
    assert load_worker_cap("own", 4, 1000, force=True)[0] == 4   # --force never goes past memory
    assert load_worker_cap("own", 4, 1000, artifact_mb=100)[0] == 2
    assert load_worker_cap("own", 4, 100)[0] == 1
    assert load_worker_cap("own", None, None)[0] == 8


def test_the_host_names_the_cap_and_the_way_past_it():
    from edgeforge.device.measure.load import check_worker_cap

    art = {"artifact": {"size_bytes": 100_000}}
    with pytest.raises(ConfigError, match=r"at most 8, the default cap .*; use --concurrency 8 or less; --force"):
        check_worker_cap([{"sessions": "shared", "concurrency": 9}], {"cores": 2}, art, False, "pi")
    check_worker_cap([{"sessions": "shared", "concurrency": 9}], {"cores": 2}, art, True, "pi")
    with pytest.raises(ConfigError, match=r"at most 3, what 1000 MB of memory holds.*--sessions shared"):
        check_worker_cap([{"sessions": "own", "concurrency": 9}], {"cores": 2, "mem_available_mb": 1000}, art,
                         True, "pi")
