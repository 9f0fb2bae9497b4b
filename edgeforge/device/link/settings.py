"""What a bench ships and how it runs: the settings resolved for one build on one device,
the files it uploads, and whether a device's architecture is the target's."""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...errors import BuildInvalid, ConfigError
from ...options import BenchOptions, parse_warmups
from .buildcheck import validate_build
from .inventory import Device
from .runner_app import APP_PREFIX, runner_app

__all__ = ["validate_build"]      # the one check of a build directory lives in .buildcheck

PREPARE_PREFIX = "@@edgeforge-prepare "


ARCH_ALIASES = {
    "x86_64": {"x86_64", "amd64"},
    "arm64": {"aarch64", "arm64"},
    "armv7": {"armv7l", "armv7", "armv8l", "armhf"},
}
RUNTIME_FOR_BACKEND = {"onnx": "onnxruntime", "lite": "paddlelite"}

def arch_matches(target_arch: str, machine: str | None) -> bool:
    return (machine or "").lower() in ARCH_ALIASES.get(target_arch, {target_arch})


@dataclass
class BenchSettings:
    warmups: str | int
    runs: int
    threads: int | None
    power_mode: str | None
    connect_timeout_s: float
    command_timeout_s: float
    runner: str                      # "python" or "benchmark_bin"
    benchmark_bin: str | None = None


def resolve_settings(manifest: dict, device: Device, opts: BenchOptions | None = None) -> BenchSettings:
    """Bench settings: the options given, else the build's target profile. ``threads`` and
    ``power_mode`` override the build's runtime settings for this run (a sweep point)."""
    o = opts or BenchOptions()
    m, c = o.measure, o.connection
    runs, warmups, timeout, connect_timeout = m.runs, m.warmups, c.timeout, c.connect_timeout
    threads, power_mode = m.threads, m.power_mode
    bench = dict((manifest.get("target_profile") or {}).get("bench") or {})
    rt = manifest.get("runtime") or {}
    runner = bench.get("runner", "python")
    if manifest["backend"] != "lite":
        runner = "python"
    elif device.benchmark_bin:
        runner = "benchmark_bin"
    settings = BenchSettings(
        warmups=parse_warmups(warmups if warmups is not None else bench.get("warmups", "auto")),
        runs=int(runs if runs is not None else bench.get("runs", 100)),
        threads=int(threads) if threads is not None else rt.get("threads"),
        power_mode=power_mode if power_mode is not None else rt.get("power_mode"),
        connect_timeout_s=float(connect_timeout if connect_timeout is not None else bench.get("connect_timeout_s", 10)),
        command_timeout_s=float(timeout if timeout is not None else bench.get("command_timeout_s", 600)),
        runner=runner, benchmark_bin=device.benchmark_bin or ("benchmark_bin" if runner == "benchmark_bin" else None))
    if settings.runs <= 0:
        raise ConfigError("--runs must be > 0")
    if settings.threads is not None and settings.threads <= 0:
        raise ConfigError("--threads must be > 0")
    if settings.command_timeout_s <= 0 or settings.connect_timeout_s <= 0:
        raise ConfigError("timeouts must be > 0")
    return settings


def results_dir_of(opts: BenchOptions | None) -> Path:
    """Where results go: ``--results``, else ``$EDGEFORGE_RESULTS``, else ``results/``."""
    return Path((opts.results_dir if opts is not None else None) or os.environ.get("EDGEFORGE_RESULTS", "results"))


def check_results_dir(path: Path, create: bool = True) -> None:
    """Before anything is measured: the results directory exists or can be made, and a file can
    be written in it (a read-only filesystem or permissions would lose the measurement at the
    end). Else ConfigError (exit 2) naming it and what chose it (``--results``,
    ``$EDGEFORGE_RESULTS`` or the default), through :func:`edgeforge.fsutil.writable_dir`.
    ``create=False`` makes nothing (a missing directory is judged by its nearest parent)."""
    from ...fsutil import writable_dir

    path = Path(path)
    env = os.environ.get("EDGEFORGE_RESULTS")
    if env and Path(env) == path:
        chosen_by = "$EDGEFORGE_RESULTS"
    elif path == Path("results") and not env:
        chosen_by = "default: $EDGEFORGE_RESULTS"
    else:
        chosen_by = "--results"
    writable_dir(path, chosen_by, what="results directory", create=create)


def build_files(build_dir: Path, manifest: dict) -> dict[str, Path]:
    """The files a bench ships, by their path under the remote directory (after
    :func:`validate_build`): the artifact, its reference data and the runner zipapp
    (:func:`runner_file` names it among them)."""
    validate_build(build_dir, manifest)
    if manifest.get("reference") is None:
        raise BuildInvalid(f"{Path(build_dir) / 'manifest.json'}: field reference is missing",
                           hint="rebuild with `edgeforge build`")
    art = manifest["artifact"]
    files = {art["path"]: build_dir / art["path"],
             manifest["reference"]["inputs"]: build_dir / manifest["reference"]["inputs"],
             manifest["reference"]["outputs"]: build_dir / manifest["reference"]["outputs"]}
    app = runner_app()
    files[app.name] = app.path      # the runner zipapp, by its digest: edgeforge_runner-<sha12>.pyz
    for rel, path in files.items():
        if not path.is_file():
            raise BuildInvalid(f"{build_dir}: {rel} is missing", hint="rebuild with `edgeforge build`")
    return files


LEGACY_RUNNER = "edgeforge_runner.py"      # what releases made before the zipapp hold


def runner_file(files: Mapping[str, object]) -> str:
    """The runner's name among a release's or :func:`build_files`' files (what ``python NAME
    ...`` runs): the zipapp, else a release's single-file runner of before."""
    app = sorted(rel for rel in files if rel.startswith(APP_PREFIX) and rel.endswith(".pyz"))
    if app:
        return app[0]
    if LEGACY_RUNNER in files:
        return LEGACY_RUNNER
    raise BuildInvalid(f"no runner among the files to run ({', '.join(sorted(files)) or 'none'})")


def needed_modules(manifest: dict, settings: BenchSettings) -> list[str]:
    mods = ["numpy"]
    if settings.runner == "python":
        mods.append(RUNTIME_FOR_BACKEND[manifest["backend"]])
    return mods
