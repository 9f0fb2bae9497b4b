"""The CLI package's shape: one exit-code map, --debug/--version anywhere, errors by cause,
typed options (no paddle, no device)."""
from __future__ import annotations

import json

import pytest

from edgeforge import __version__
from edgeforge.cli import main
from edgeforge.cli.main import VERBS, build_parser, exit_code
from edgeforge.errors import (AuthFailed, Busy, ConfigError, DeviceError, ExitCode, GateFailed, PassError,
                              RunnerTimeout, Unhealthy, Unreachable)
from edgeforge.options import BenchOptions, BuildOptions
from edgeforge.targets import load_target


def test_exit_codes_are_declared_once_and_a_bug_is_not_a_failed_pass():
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 70, 130]
    assert exit_code(ConfigError("x")) == ExitCode.USAGE
    assert exit_code(PassError("export", "x")) == ExitCode.PASS
    assert exit_code(Unreachable("d", "x")) == ExitCode.DEVICE
    assert exit_code(GateFailed("x")) == ExitCode.GATE
    assert exit_code(KeyboardInterrupt()) == ExitCode.INTERRUPTED
    assert exit_code(ZeroDivisionError()) == ExitCode.INTERNAL != ExitCode.PASS


def test_an_internal_error_exits_70_in_one_line(monkeypatch, capsys):
    import edgeforge.cli.build as build

    def boom(args):
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(build, "cmd_targets", boom)
    assert main(["targets"]) == 70
    err = capsys.readouterr().err
    assert err.startswith("error: internal error ZeroDivisionError: division by zero (re-run with --debug")
    assert err.count("\n") == 1
    assert main(["targets", "--debug"]) == 70
    assert "Traceback" in capsys.readouterr().err        # --debug after the verb


@pytest.mark.parametrize("argv", [["--version", "targets"], ["targets", "--version"]])
def test_version_before_or_after_the_verb(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0 and capsys.readouterr().out.strip() == f"edgeforge {__version__}"


def test_debug_before_the_verb_is_not_reset_by_the_verb():
    args = build_parser().parse_args(["--debug", "targets"])
    assert args.debug is True
    assert build_parser().parse_args(["targets"]).debug is False


def test_every_verb_module_registers_and_none_vanishes():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert {"build", "check", "targets", "cache", "bench", "run", "sweep", "devices", "report",
            "compare", "gate"} <= set(sub.choices)
    assert all(callable(getattr(m, "register", None)) for m in VERBS)


def test_device_errors_carry_the_device_as_a_field():
    e = AuthFailed("pi-3", "authentication failed for u@h:22", hint="check the key")
    assert (e.device, e.detail) == ("pi-3", "authentication failed for u@h:22")
    assert e.one_line() == "device pi-3: authentication failed for u@h:22; check the key"
    again = e.restate(f"{e.detail} (after 3 tries)")
    assert type(again) is AuthFailed and again.one_line().startswith("device pi-3: authentication failed")
    assert again.detail.endswith("(after 3 tries)") and again.hint == "check the key"
    assert Unreachable.transient and not AuthFailed.transient and not RunnerTimeout.transient
    assert not Busy.counts_against_health and not Unhealthy.counts_against_health
    assert DeviceError.counts_against_health and isinstance(e, DeviceError)


def test_a_transient_connect_failure_is_retried_by_class(tmp_path, monkeypatch):
    from edgeforge.device.measure import bench as bench_mod
    from edgeforge.device.link.inventory import Device

    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").write_text(json.dumps({
        "schema": "edgeforge.build/1", "name": "m", "target": "linux-x86", "backend": "onnx",
        "precision": "fp32", "artifact": {"path": "model.onnx", "sha256": "ab" * 32},
        "inputs": [{"name": "x", "shape": [1, 4], "dtype": "float32"}], "runtime": {"threads": 1}, "target_profile": {"arch": "x86_64", "bench": {}}}))
    dev = Device(name="d", host="h", target="linux-x86", workdir="/w")
    tries = []

    def open_(self, fail=(Unreachable, Unreachable)):
        tries.append(1)
        if len(tries) <= len(fail):
            raise fail[len(tries) - 1]("d", "cannot reach h:22: connection refused")
        return self

    monkeypatch.setattr(bench_mod.SSHTransport, "open", open_)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    settings = bench_mod.resolve_settings(manifest, dev)
    b = bench_mod.Bench(tmp_path / "b", dev, settings, BenchOptions.of(retries=2), backoff_s=0.0)
    b.connect()
    assert len(tries) == 3 and b.attempts == 3
    tries.clear()
    b = bench_mod.Bench(tmp_path / "b", dev, settings, BenchOptions.of(retries=1), backoff_s=0.0)
    with pytest.raises(Unreachable, match=r"^device d: cannot reach h:22: connection refused \(after 2 tries\)"):
        b.connect()
    tries.clear()
    monkeypatch.setattr(bench_mod.SSHTransport, "open", lambda self: open_(self, fail=(AuthFailed,)))
    with pytest.raises(AuthFailed):
        bench_mod.Bench(tmp_path / "b", dev, settings, BenchOptions.of(retries=5), backoff_s=0.0).connect()
    assert len(tries) == 1                                  # not transient: tried once


def test_build_options_resolve_once_against_the_target():
    orin = load_target("jetson-orin")
    r = BuildOptions().resolve(orin)
    assert (r.backend, r.precision) == (orin.backend.default, orin.precision_for(None))
    assert r.max_accuracy_drop == orin.quantization.max_accuracy_drop and r.min_cosine == orin.quantization.min_cosine
    assert not r.algo_fixed and r.algo == orin.quantization.algo
    r = BuildOptions.of(max_accuracy_drop=2, algo="hist", no_cache=True).resolve(orin)
    assert r.max_accuracy_drop == 2.0 and r.algo == "hist" and r.algo_fixed and not r.use_cache
    with pytest.raises(TypeError, match="unexpected option"):
        BuildOptions.of(precison="fp32")
    with pytest.raises(ConfigError, match="precision"):
        BuildOptions.of(precision="int4")
    with pytest.raises(ConfigError, match="Paddle Lite x86 INT8"):
        BuildOptions.of(backend="lite", precision="int8").resolve(load_target("linux-x86"))


def test_bench_options_parse_warmups_and_refuse_bad_values():
    assert BenchOptions.of(warmups="5").measure.warmups == 5
    assert BenchOptions.of(warmups="auto").measure.warmups == "auto"
    assert BenchOptions().measure.warmups is None and BenchOptions.of(timeout=3).connection.timeout == 3.0
    with pytest.raises(ConfigError, match="--warmups"):
        BenchOptions.of(warmups="many")
    with pytest.raises(ConfigError, match="runs"):
        BenchOptions.of(runs=0)


def test_options_by_concern():
    """issue 48: a measuring verb's options are a connection, a measurement and a lab place,
    each its own typed object; the flat library call routes every name to its part, and a verb
    that only reaches a device takes a ConnectionOptions."""
    from edgeforge.options import ConnectionOptions, LabOptions, MeasureOptions

    o = BenchOptions.of(runs=3, retries=0, priority=7, inventory="d.toml", health=False, end_to_end=True)
    assert o.measure == MeasureOptions.of(runs=3, end_to_end=True) and o.health is False
    assert o.connection == ConnectionOptions.of(retries=0, inventory="d.toml", lab=LabOptions.of(priority=7))
    again = BenchOptions.of(o, timeout=5, wait_timeout=9)
    assert again.connection.timeout == 5.0 and again.connection.lab == LabOptions.of(priority=7, wait_timeout=9)
    assert again.measure == o.measure and again.connection.retries == 0
    assert set(ConnectionOptions.model_fields) & set(MeasureOptions.model_fields) == set()
    with pytest.raises(TypeError, match="runs"):
        ConnectionOptions.of(runs=3)             # not a connection's concern
    with pytest.raises(ConfigError, match="priority"):
        BenchOptions.of(priority=101)
