"""What every verb module shares: the console, argument types, the shared flag groups (build,
bench, connection, gates) and the gate runner (the progress spinners: ``_render``).

A verb module imports this and the library; never another verb module.
"""
from __future__ import annotations

import argparse
import math
import textwrap
from pathlib import Path

from ..errors import ConfigError, GateFailed
from ..options import (GATE_NAMES, LAB_WAIT_S, MAX_COUNT, MAX_PRIORITY, MAX_RETRIES, MAX_SECONDS, MAX_THREADS,
                       GateOptions)

EXIT_CODES_HELP = """exit codes: 0 ok; 1 a quality gate failed (or a build failed verify);
2 usage or configuration (nothing was benched); 3 a build pass failed;
4 a device failed (unreachable after retries, lost mid-run, busy, runner
failed, marked unhealthy); 70 an internal error (a bug: please report it);
130 interrupted by SIGINT (Ctrl-C), SIGTERM or SIGHUP (what was measured is
kept as an -incomplete result, the device's runner is stopped, its lease
released). A bad build (its manifest or files, also when the device's runner
refuses them) is 2, never 4: it is not counted against the device's health.
Precedence: 4 over 1 -- with several devices, the run goes on when one
fails and every result is kept, gates are still evaluated (and --junit
written) over the results that landed, but the exit code is 1 for a failed
gate only when every device succeeded; otherwise it is 4.
"""


class Parser(argparse.ArgumentParser):
    """One-line usage errors (a ConfigError, exit 2); ``--debug`` and ``--version`` on every
    (sub)parser, so they work before or after the verb."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "--debug" not in self._option_string_actions:
            self.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                              help="show tracebacks")
        if "--version" not in self._option_string_actions:
            from .. import __version__

            self.add_argument("--version", action="version", version=f"edgeforge {__version__}")

    def error(self, message):  # one line, exit 2
        raise ConfigError(f"{message} (see `{self.prog} --help`)")


def console(stderr: bool = False):
    from rich.console import Console

    from ..quiet import TERMINAL, TERMINAL_OUT

    # the terminal even while a build step sends native libraries' output to its log
    return Console(file=TERMINAL if stderr else TERMINAL_OUT, highlight=False, soft_wrap=True)


def escape(text) -> str:
    from rich.markup import escape as _escape

    return _escape(str(text))


def wrap(text: str) -> str:
    return textwrap.fill(text, width=78)


def say_error(message: str) -> None:
    """One red line on stderr, for a failure a verb reports itself before its exit code."""
    console(stderr=True).print(f"error: {message}", style="red", markup=False)


# ---------------------------------------------------------------- argument types
# Every numeric flag of every verb goes through number() (one value) or numbers() (a comma
# list): a finite int or float in its range, else one usage line that names the flag (argparse
# prefixes "argument --flag:"), exit 2. nan, inf, negatives, absurdly large values and text are
# refused the same way everywhere.

def _in_range(v, low, high, allow_zero) -> bool:
    finite = isinstance(v, int) or math.isfinite(v)          # an int of 400 digits is no float
    return finite and (v > low or (allow_zero and v == low)) and v <= high


def _bounds(low, high, allow_zero) -> str:
    def g(x):
        return f"{x:.0f}" if float(x).is_integer() and abs(x) < 1e10 else f"{x:g}"
    return f"{'>=' if allow_zero else '>'} {g(low)}, at most {g(high)}"


def number(cast, what: str, allow_zero: bool = False, *, at_most: float, at_least: float = 0):
    """An argparse type: one finite number of ``cast`` (int or float), > ``at_least`` (>= with
    ``allow_zero``) and <= ``at_most``."""
    def parse(text: str):
        try:
            v = cast(str(text).strip())
        except (TypeError, ValueError, OverflowError):
            v = None
        if v is None or not _in_range(v, at_least, at_most, allow_zero):
            raise argparse.ArgumentTypeError(f"expected {what} {_bounds(at_least, at_most, allow_zero)}, "
                                             f"not {text!r}")
        return v

    parse.__name__ = what
    return parse


def numbers(cast, what: str, *, at_most: float, as_text: bool = False, at_least: float = 0,
            allow_zero: bool = False):
    """An argparse type: a comma-separated list of ``cast`` numbers, each > ``at_least`` (>= with
    ``allow_zero``) and <= ``at_most``; a tuple (``as_text``: the text back, checked, for a verb
    that parses it later)."""
    one = number(cast, what, allow_zero, at_most=at_most, at_least=at_least)

    def parse(text: str):
        items = [x for x in str(text).split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, not {text!r}")
        try:
            values = tuple(one(x) for x in items)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what} "
                                             f"{_bounds(at_least, at_most, allow_zero)}, not {text!r}") from None
        return ",".join(x.strip() for x in items) if as_text else values

    parse.__name__ = what
    return parse


seconds = number(float, "seconds", at_most=MAX_SECONDS)                       # timeouts
positive_float = seconds
nonneg_float = number(float, "seconds", allow_zero=True, at_most=MAX_SECONDS)   # waits
positive_int = number(int, "a count", at_most=MAX_COUNT)
nonneg_int = number(int, "a count", allow_zero=True, at_most=MAX_COUNT)
retries = number(int, "a count", allow_zero=True, at_most=MAX_RETRIES)
threads = number(int, "a thread count", at_most=MAX_THREADS)
points = number(float, "accuracy points", allow_zero=True, at_most=100)
cosine = number(float, "a cosine", at_most=1)
milliseconds = number(float, "milliseconds", allow_zero=True, at_most=3_600_000)
speedup = number(float, "a speed-up factor", allow_zero=True, at_most=1000)
share = number(float, "a share", allow_zero=True, at_most=1)
flops_share = number(float, "a FLOPs share", at_most=0.95)    # --prune
priority = number(int, "a priority", allow_zero=True, at_most=MAX_PRIORITY)


# ---------------------------------------------------------------- shared flag groups

def add_build_flags(p, full: bool = True) -> None:
    """--target, --backend, --precision, --out, --no-cache; with ``full`` the INT8 flags too."""
    p.add_argument("--target", required=True)
    p.add_argument("--backend", choices=["lite", "onnx"],
                   help="override the target's default backend")
    p.add_argument("--precision", choices=["int8", "fp16", "fp32", "auto"],
                   help="auto: build each precision the target allows, keep the fastest within "
                        "the accuracy budget (build: timed on the host where it can run the "
                        "artifact; run: benched on the device)")
    p.add_argument("--out", metavar="DIR",
                   help="build directory (default: build/<name>-<target>[...])")
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--remote-cache", metavar="URL",
                   help="a shared build cache over HTTP, behind the local one (default: "
                        "$EDGEFORGE_REMOTE_CACHE, [cache] remote in the user config)")
    p.add_argument("--remote-cache-mode", choices=["readwrite", "read", "off"],
                   help="read: use it, upload nothing (pull requests); default readwrite")
    p.add_argument("--remote-timeout", type=number(float, "seconds", at_most=3600), metavar="S",
                   help="seconds a remote cache request may take (default 10)")
    if not full:
        return
    p.add_argument("--calibration", choices=["KL", "hist", "mse", "avg", "abs_max"],
                   help="calibration algorithm")
    add_budget_flag(p)
    p.add_argument("--min-cosine", type=cosine, metavar="C",
                   help="INT8 budget without labels: worst-output cosine against float "
                        "(default: the target's, 0.99)")
    p.add_argument("--calibration-search", action="store_true",
                   help="try KL, hist, mse and avg calibration; keep the best on the "
                        "evaluation set")
    p.add_argument("--max-search-seconds", type=number(float, "seconds", at_most=86400), metavar="S",
                   help="wall time of the INT8 float-layer search (default: [quantization] "
                        "max_seconds, else 240); past it the best within the budget ships")
    p.add_argument("--no-fallback", action="store_true",
                   help="never keep layers in float; a missed accuracy budget fails the "
                        "build (exit 1)")
    p.add_argument("--qat", action=argparse.BooleanOptionalAction, default=None,
                   help="quantization-aware fine-tuning by distillation (ONNX INT8): ship it when "
                        "every layer is INT8 within the budget, else PTQ ([quantization.qat])")
    p.add_argument("--prune", type=flops_share, metavar="SHARE",
                   help="remove this share of the FLOPs (0 to 0.95) with L1-norm filter pruning, then "
                        "fine-tune by distillation; a missed accuracy budget is exit 1 ([prune])")
    p.add_argument("--no-legalize", action="store_true",
                   help="skip the legalize pass and pre-flight: hand the raw export to the "
                        "converter (debugging)")


def add_budget_flag(p) -> None:
    """--max-accuracy-drop as the INT8 budget: on the verbs that build (build, run, sweep)."""
    p.add_argument("--max-accuracy-drop", type=points, metavar="POINTS",
                   help="INT8 budget in accuracy points, when the evaluation set has "
                        "labels (default: the target's); the gate is --gate-accuracy-drop")


def add_bench_flags(p, device: bool = True, builds: bool = False) -> None:
    """The flags of a verb that benches. ``builds``: the verb also builds (run, sweep), so
    --max-accuracy-drop is the INT8 budget there and the accuracy gate is only
    --gate-accuracy-drop."""
    if device:
        p.add_argument("--device", required=True, metavar="NAME",
                       help="device name in the inventory")
    p.add_argument("--runs", type=positive_int, metavar="N",
                   help="timed runs (default: the target's bench.runs)")
    p.add_argument("--warmups", metavar="auto|N",
                   help="'auto' (until timings settle) or a count (default: the target's)")
    p.add_argument("--no-fp32-sibling", dest="fp32_sibling", action="store_false",
                   help="an INT8 build: do not time the fp32 model it ships in interleaved rounds "
                        "(its verdict then compares with an earlier fp32 run)")
    add_session_flags(p)
    add_gate_arguments(p, old_spelling=not builds)


def add_session_flags(p) -> None:
    """What a verb that runs something on a device takes beside what it runs: the connection
    flags (:func:`add_connection_flags`), results, --json, --quiet."""
    add_connection_flags(p)
    p.add_argument("--results", metavar="DIR",
                   help="where result JSON goes (default: $EDGEFORGE_RESULTS or ./results)")
    p.add_argument("--json", action="store_true", help="print the result JSON instead of a table")
    p.add_argument("--quiet", "-q", action="store_true")


def add_connection_flags(p, lease: bool = True) -> None:
    """How a verb reaches a device, the same for every verb that does (one device session,
    :class:`edgeforge.device.link.session.Session`): timeouts, connect retries, the lease wait
    (``lease``: the verb takes the lease), a lab place's queue, the inventory and host-key
    policy. :func:`connection_options` reads them."""
    from ..options import RETRIES

    p.add_argument("--timeout", type=positive_float, metavar="S",
                   help="seconds for each command on the device (default: the target's)")
    p.add_argument("--connect-timeout", type=positive_float, metavar="S",
                   help="seconds to connect (default: the target's)")
    if lease:
        p.add_argument("--wait", type=nonneg_float, default=0.0, metavar="S",
                       help="wait up to S seconds for a device another run holds "
                            "(default 0: report it busy, exit 4)")
    p.add_argument("--retries", type=retries, default=RETRIES, metavar="N",
                   help=f"connect again up to N times after a transient failure (refused, "
                        f"reset, timed out), backing off 0.5s, 1s, 2s, ... (default {RETRIES})")
    lab = p.add_argument_group("labgrid places (devices from a [labgrid] inventory)")
    lab.add_argument("--priority", type=priority, default=0, metavar="N",
                     help=f"the reservation's priority in labgrid's queue, 0 to "
                          f"{MAX_PRIORITY} (default 0; higher goes first)")
    lab.add_argument("--wait-timeout", type=seconds, default=LAB_WAIT_S, metavar="S",
                     help=f"wait up to S seconds in labgrid's queue for the place, then exit 4 "
                          f"naming its holder (default {LAB_WAIT_S:g})")
    add_device_flags(p)


def connection_options(args):
    """ConnectionOptions of the connection flags (``add_connection_flags``) a verb took."""
    from ..options import ConnectionOptions, LabOptions

    return ConnectionOptions.of(timeout=args.timeout, connect_timeout=args.connect_timeout,
                                wait=getattr(args, "wait", 0.0), retries=args.retries,
                                trust_new_host=args.trust_new_host, inventory=args.inventory,
                                lab=LabOptions.of(priority=args.priority, wait_timeout=args.wait_timeout))


def add_device_flags(p) -> None:
    """--inventory and --trust-new-host: what every verb that talks to a device takes."""
    p.add_argument("--trust-new-host", action="store_true",
                   help="accept and record an unknown host key")
    p.add_argument("--inventory", metavar="FILE",
                   help="devices.toml (default: $EDGEFORGE_DEVICES, then ./devices.toml)")


def build_options(args, **extra):
    """BuildOptions from the build flags (``add_build_flags``) a verb took."""
    from ..options import BuildOptions

    full = {"algo": "calibration", "max_accuracy_drop": "max_accuracy_drop",
            "min_cosine": "min_cosine", "calibration_search": "calibration_search"}
    given = {k: getattr(args, flag) for k, flag in full.items() if hasattr(args, flag)}
    if hasattr(args, "no_fallback"):
        given["float_fallback"] = not args.no_fallback
    if hasattr(args, "no_legalize"):
        given["legalize"] = not args.no_legalize
    if getattr(args, "qat", None) is not None:
        given["qat"] = args.qat
    if getattr(args, "max_search_seconds", None) is not None:
        given["max_search_seconds"] = args.max_search_seconds
    if getattr(args, "prune", None) is not None:
        given["prune"] = args.prune
    for flag in ("remote_cache", "remote_cache_mode", "remote_timeout"):
        if getattr(args, flag, None) is not None:
            given[flag] = getattr(args, flag)
    return BuildOptions.of(precision=getattr(args, "precision", None), backend=args.backend,
                           no_cache=args.no_cache, **given, **extra)


def bench_options(args, **extra):
    """BenchOptions from the bench flags (``add_bench_flags``) a verb took: the connection,
    the measurement (``extra``: threads, power mode, profile, end-to-end), the results."""
    from ..options import BenchOptions, MeasureOptions

    return BenchOptions.of(connection=connection_options(args), results_dir=args.results,
                           measure=MeasureOptions.of(runs=args.runs, warmups=args.warmups,
                                                     fp32_sibling=getattr(args, "fp32_sibling", True), **extra))


# ---------------------------------------------------------------- gates

GATE_FLAGS = GATE_NAMES
_NEEDS_GATE = "--junit needs a gate: --gate-accuracy-drop, --max-p50-ms or --min-int8-speedup"


def add_gate_arguments(parser, old_spelling: bool = True) -> None:
    """The gate flags. The accuracy gate is --gate-accuracy-drop; ``old_spelling`` also takes
    --max-accuracy-drop for it, on verbs that do not build (bench, deploy, gate), where the
    name cannot be mistaken for the INT8 budget of ``build``."""
    grp = parser.add_argument_group("quality gates (exit 1 when one fails)")
    grp.add_argument("--gate-accuracy-drop", type=points, metavar="POINTS",
                     help="fail a run whose accuracy drop on the device exceeds POINTS "
                          "percentage points")
    if old_spelling:
        grp.add_argument("--max-accuracy-drop", dest="gate_accuracy_drop", type=points,
                         metavar="POINTS", help="the same gate, by its old name (on build, run "
                                                "and sweep this name is the INT8 budget)")
    grp.add_argument("--max-metric-drop", type=points, metavar="POINTS",
                     help="fail a run whose [task] metric (drift.task) drops more than POINTS")
    grp.add_argument("--max-p50-ms", type=milliseconds, metavar="MS",
                     help="fail a run whose median latency exceeds MS")
    grp.add_argument("--min-int8-speedup", type=speedup, metavar="X",
                     help="fail an int8 run less than X times faster (p50) than fp32 of the "
                          "same model on the same device")
    grp.add_argument("--min-accelerated-nodes", type=share, metavar="SHARE",
                     help="fail an onnxruntime run with less than SHARE (0-1) of its nodes on an "
                          "accelerating execution provider (TensorRT, CUDA)")
    grp.add_argument("--junit", metavar="FILE", help="also write the gate results as JUnit XML")
    grp.add_argument("--force", action="store_true",
                     help="apply --max-p50-ms/--min-int8-speedup to emulated results anyway")


def gate_options(args) -> GateOptions:
    """The one place the gate thresholds are read from parsed flags (a GateOptions passes
    through as it is)."""
    if isinstance(args, GateOptions):
        return args
    given = {k: getattr(args, k, None) for k in GATE_FLAGS if k != "max_accuracy_drop"}
    return GateOptions.of(max_accuracy_drop=getattr(args, "gate_accuracy_drop", None), **given,
                          force=bool(getattr(args, "force", False)), junit=getattr(args, "junit", None))


def gates_requested(args) -> bool:
    return gate_options(args).requested


def check_gate_flags(args) -> None:
    """Before anything runs: --junit needs a gate (the thresholds were checked when read)."""
    g = gate_options(args)
    if g.junit and not g.requested:
        raise ConfigError(_NEEDS_GATE)
    if g.junit:                     # a user's file there: refused before anything runs
        from ..report.junit import check_junit_path

        check_junit_path(g.junit)


def gate_verdict(args, results: list[dict], new_paths=None, *, reference: list[dict] = ()) -> GateFailed | None:
    """The gates of a verb's flags over ``results``, one function for every verb: prints them,
    writes --junit, and returns the failure (or None) for the verb to raise, after whatever
    else it reports (a device failure takes precedence). ``new_paths``: the files of
    ``results``; given, the earlier runs in the results directory may serve as the fp32
    counterparts of INT8 runs (--min-int8-speedup), beside ``reference``."""
    g = gate_options(args)
    if not g.requested:
        if g.junit:
            raise ConfigError(_NEEDS_GATE)
        return None
    from ..report.gates import evaluate_gates, require_passed
    from ..report.junit import write_junit

    reference = list(reference)
    if new_paths is not None and g.thresholds.min_int8_speedup is not None:
        reference += results_history(args, new_paths)
    gates = evaluate_gates(results, g.thresholds, reference=reference, force=g.force)
    print_gates(gates)
    if g.junit:
        console().print(f"junit: {write_junit(gates, Path(g.junit))}")
    try:
        require_passed(gates)
    except GateFailed as exc:
        return exc
    return None


def results_history(args, new_paths=()) -> list[dict]:
    """The earlier runs in the results directory (--results, $EDGEFORGE_RESULTS, results/),
    without ``new_paths``: the fp32 counterparts of new INT8 runs."""
    import os

    from ..report.load import earlier_results

    return earlier_results(args.results or os.environ.get("EDGEFORGE_RESULTS", "results"), new_paths)


def print_gates(gates) -> None:
    """A table where it fits the terminal; else one line per gate (status, gate, measured,
    limit, then device and run), wrapped at clause boundaries."""
    from rich.table import Table

    from ..report.gates import UNITS
    from ._width import clause_wrap, table_width

    con = console()
    heads = ("status", "device", "gate", "run", "measured", "limit")
    rows = [["pass" if g.passed else "FAIL", f"{g.device} {g.fingerprint}".strip(),
             f"{g.name} [{g.metric}]" if getattr(g, "metric", "") else g.name, g.subject or "-",
             "n/a" if g.measured is None else f"{g.measured:.4g}{UNITS[g.name]}",
             f"{g.threshold:g}{UNITS[g.name]}"] for g in gates]      # drop gates name their metric
    if table_width([[h, *(r[i] for r in rows)] for i, h in enumerate(heads)]) > con.width:
        con.print("quality gates", markup=False)
        for r in rows:
            colour = "green" if r[0] == "pass" else "red"
            for line in clause_wrap(f"{r[0]} {r[2]}: {r[4]} (limit {r[5]}): {r[1]}: {r[3]}", con.width):
                con.print(line, style=colour, markup=False)
        return
    t = Table(title="quality gates", title_justify="left")
    for col in heads:
        t.add_column(col, no_wrap=True, justify="right" if col in ("measured", "limit") else "left")
    for r in rows:
        colour = "green" if r[0] == "pass" else "red"
        t.add_row(f"[{colour}]{r[0]}[/{colour}]", *map(escape, r[1:]))
    con.print(t)
