"""Library entry points. The CLI is a thin layer over these; nothing here prints or exits."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .cache import Cache, sha256_file, sha256_json
from .remote_cache import open_cache
from .errors import ConfigError, EdgeforgeError
from .fsutil import atomic_dir, out_lock, writable_dir, write_json_atomic
from .manifest import BUILD_SCHEMA, build_manifest, read_manifest
from .options import BuildOptions, ResolvedBuild, resolve_precision
from .plan import plan_passes
from .pipeline import Event, Pipeline
from .project import Project, load_project
from .targets import TargetProfile, load_target

Log = Callable[[str], None]


@dataclass
class BuildResult:
    out_dir: Path
    manifest: dict

    @property
    def verify_status(self) -> str:
        return self.manifest["verify"]["status"]


def project_artifact(project: Project):
    from .passes.base import PROJECT, Artifact

    parts = {"model": project.spec.model.model_dump(mode="json")}
    if project.fold is not None:        # [preprocess] fold = true: the program begins with it
        parts["fold"] = project.fold
    files = [p for p in project.source_files() if p.name != "edgeforge.toml"]
    for p in files:
        if not p.is_file():
            if p == project.weights:
                raise ConfigError(f"weights file not found: {p}", hint="train the model first or fix [model].weights")
            continue
        # an inference model's program may live outside the project: keyed by its full path
        key = p.relative_to(project.root).as_posix() if p.is_relative_to(project.root) else p.as_posix()
        parts[key] = sha256_file(p)
    return Artifact(PROJECT, project.root, digest=sha256_json(parts))


def default_out_dir(project: Project, target: TargetProfile, backend: str, precision: str) -> Path:
    suffix = "" if backend == target.backend.default else f"-{backend}"
    if precision != target.precision_for(backend):
        suffix += f"-{precision}"
    return Path("build") / f"{project.name}-{target.name}{suffix}"


def is_build_dir(path: Path) -> bool:
    """A previous edgeforge build: a directory whose manifest.json has an edgeforge.build/*
    schema. Only such a directory may be replaced by ``--out``."""
    try:
        schema = json.loads((Path(path) / "manifest.json").read_text()).get("schema")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(schema, str) and schema.startswith("edgeforge.build/")


def check_out_dir(dest: Path) -> None:
    """Refuse, before any pass runs (one line naming the path), an ``--out`` that must not be
    replaced or cannot be written: an existing path that is not a previous build, a path below
    a file, a directory that cannot be written (read-only filesystem, permissions). Creates
    nothing."""
    dest = Path(dest)
    try:
        here = Path.cwd()
    except OSError:
        here = None
    if here is not None and here.is_relative_to(os.path.abspath(dest)):
        raise ConfigError(f"--out {dest} is {'' if here == Path(os.path.abspath(dest)) else 'above '}"
                          "the current directory, which the build would replace",
                          hint="run edgeforge from outside it, or choose another --out")
    if dest.is_symlink() or dest.exists():
        if dest.is_symlink() or not dest.is_dir() or not is_build_dir(dest):
            kind = "a directory" if dest.is_dir() and not dest.is_symlink() else (
                "a symlink" if dest.is_symlink() else "a file")
            raise ConfigError(f"--out {dest} exists and is {kind}, not an edgeforge build",
                              hint="edgeforge replaces only a previous build: "
                                   "choose another path or remove it yourself")
    # the build is renamed into place in its parent: that is the directory that must be writable
    writable_dir(dest.parent, "--out", create=False, shown=dest)


def _write_out(out_dir: Path, final, manifest: dict, logs: Path | None = None) -> None:
    """The build directory: the final artifact's files, manifest.json, and under ``logs/`` the
    steps' logs from ``logs`` (native libraries' output, quiet.native_to_log) that hold any."""
    try:
        with atomic_dir(out_dir) as tmp:
            for p in final.path.iterdir():
                (shutil.copytree if p.is_dir() else shutil.copy2)(p, tmp / p.name)
            kept = sorted(p for p in logs.glob("*.log") if p.stat().st_size) if logs is not None else []
            if kept:
                (tmp / "logs").mkdir(exist_ok=True)
                for p in kept:
                    shutil.copy2(p, tmp / "logs" / p.name)
            write_json_atomic(tmp / "manifest.json", manifest)
    except OSError as exc:
        raise ConfigError(f"--out {out_dir}: cannot write it ({exc.strerror or exc}); "
                          "anything there before is as it was") from None


def _nonfinite(arr: np.ndarray) -> str | None:
    """'3 NaN and 1 Inf values (of 8192)', or None when every value is finite (or not float)."""
    if not np.issubdtype(arr.dtype, np.floating):
        return None
    nan = int(np.isnan(arr).sum())
    inf = int(np.isinf(arr).sum())
    if not nan and not inf:
        return None
    parts = [f"{n} {what}" for n, what in ((nan, "NaN"), (inf, "Inf")) if n]
    return f"{' and '.join(parts)} value{'s' if nan + inf > 1 else ''} (of {arr.size})"


def check_data(project: Project, which: str, arrays: dict) -> None:
    """NaN or Inf in a data set makes verify pass on ``nan`` and calibration fail deep in a
    pass: refuse it first, one line naming the file, the array and how many values."""
    rel = getattr(project.spec.data, which)
    for name, arr in arrays.items():
        bad = _nonfinite(arr)
        if bad:
            raise ConfigError(f"{which} data {rel}: array '{name}' holds {bad}",
                              hint="every value must be finite: clean or drop those samples")


def check_weights(project: Project) -> None:
    """NaN or Inf in the weights: refused before export, naming the file and the tensor."""
    from .weights import load_state_dict

    if project.weights is None or not project.weights.is_file():
        return
    for name, arr in load_state_dict(project.weights).items():
        bad = _nonfinite(arr)
        if bad:
            raise ConfigError(f"weights {project.spec.model.weights}: tensor '{name}' holds {bad}",
                              hint="the model's weights must be finite: re-train or re-export them")


def check_labels(project: Project, labels: np.ndarray | None, exported) -> None:
    """Labels outside the model's output range make float accuracy 0 and any budget pass.
    The number of classes is the last dimension of the labelled output's shape, as export's
    probe recorded it (``output_shapes`` in its metadata): so this runs right after export,
    before any other pass."""
    if labels is None or exported is None:
        return
    shapes = exported.meta.output_shapes or []
    k = getattr(project.spec.data, "label_output", 0)
    if k >= len(shapes) or len(shapes[k]) != 2 or not shapes[k][-1] or shapes[k][-1] < 1:
        return                          # not a [batch, classes] output: nothing to check against
    classes = int(shapes[k][-1])
    bad = (labels < 0) | (labels >= classes)
    if bad.any():
        raise ConfigError(
            f"evaluation data {project.spec.data.evaluation}: array 'labels' has {int(bad.sum())} "
            f"value{'s' if bad.sum() > 1 else ''} outside the model's {classes} classes "
            f"(0..{classes - 1}; found {int(labels.min())}..{int(labels.max())})",
            hint="labels are class indices into the model's output")


def check_label_output(project: Project, exported) -> None:
    """``[data] label_output`` must name one of the model's outputs (export's probe counted
    them): else exit 2 naming the key, before quantize or verify index past the last output."""
    k = project.spec.data.label_output
    n = exported.meta.num_outputs if exported is not None else None
    if n is None and exported is not None:
        n = len(exported.meta.output_shapes or []) or None
    if isinstance(n, int) and k >= n:
        raise ConfigError(f"{project.root / 'edgeforge.toml'}: [data] label_output = {k}, "
                          f"but the model has {n} output(s)",
                          hint=f"use 0 to {n - 1}: the index of the output the labels are for")


def check_post(project: Project, exported) -> None:
    """``[postprocess]`` output indices and a CTC blank against export's probe: exit 2 naming
    the key, before quantize (:func:`edgeforge.task.post.against_outputs`)."""
    from .task.post import against_outputs

    shapes = exported.meta.output_shapes if exported is not None else None
    bad = against_outputs(project.spec, shapes) if isinstance(shapes, list) and shapes else None
    if bad:
        raise ConfigError(f"{project.root / 'edgeforge.toml'}: {bad}",
                          hint="fix the key it names (export's probe counted the model's outputs)")


def _after_export(project: Project, labels, ctx, on_event: Event | None) -> Event:
    from .passes.base import PADDLE_FLOAT

    def emit(name: str, phase: str, info: dict) -> None:
        if on_event is not None:
            on_event(name, phase, info)
        if name == "export" and phase == "done":
            exported = ctx.history.get(PADDLE_FLOAT)
            check_label_output(project, exported)
            check_labels(project, labels, exported)
            check_post(project, exported)
    return emit


def _run_routes(project: Project, plan: ResolvedBuild, cache, source, ctx, emit: Event):
    """The pipeline on each program route in turn (``passes.export.routes_for``) until one
    builds and verifies: a pass error or a failed verify on the PIR route is one log line, then
    the legacy route. Returns ``(final, steps, fallback record or None)``."""
    from .errors import PassError
    from .passes.base import PADDLE_FLOAT
    from .passes.export import routes_for

    routes = routes_for(project, plan.backend, plan.target)
    fallback = None
    for i, route in enumerate(routes):
        ctx.history.clear()
        try:
            final, steps = Pipeline(plan_passes(project, plan, route), cache).run(source, ctx, emit)
            why = None if final.meta.verify.status != "failed" else f"verify failed: {final.meta.verify.reason}"
        except PassError as exc:
            if i + 1 == len(routes) or not _route_was(ctx, PADDLE_FLOAT, route):
                raise
            why = str(exc)
        if why is None or i + 1 == len(routes) or not _route_was(ctx, PADDLE_FLOAT, route):
            return final, steps, fallback
        fallback = {"from": route, "to": routes[i + 1], "reason": why[:300]}
        ctx.log(f"the {route} route failed ({why[:200]}); trying the {routes[i + 1]} route")
    raise AssertionError("unreachable")


def _route_was(ctx, kind: str, route: str) -> bool:
    """Whether the program export wrote is of ``route`` (a PIR export may itself have fallen
    back to the legacy program: then the next route would repeat it; an export that failed
    already tried both)."""
    exported = ctx.history.get(kind)
    return exported is not None and (exported.meta.export or {}).get("route", route) == route


OUT_LOCK_TIMEOUT_S = 3600.0        # $EDGEFORGE_OUT_LOCK_TIMEOUT: how long a build waits for --out


def _lock_timeout() -> float:
    import math

    raw = os.environ.get("EDGEFORGE_OUT_LOCK_TIMEOUT")
    if raw is None or raw == "":
        return OUT_LOCK_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (math.isfinite(value) and 0 <= value <= 7 * 86400):
        raise ConfigError(f"EDGEFORGE_OUT_LOCK_TIMEOUT={raw}: not a number of seconds "
                          "from 0 to 604800")
    return value




def toolchain_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("paddlepaddle", "paddlelite", "paddle2onnx", "onnxruntime", "paddleslim", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    from .toolchain import lite_versions   # Paddle Lite runs in its own interpreter

    out.update(lite_versions())
    return out


def build(project_dir: str | Path, target: str, options: BuildOptions | None = None, *,
          out: str | Path | None = None, on_event: Event | None = None, log: Log | None = None,
          **overrides) -> BuildResult:
    """Build PROJECT for TARGET. Returns the output directory and its manifest.

    ``options`` (or the defaults) with ``overrides``, any :class:`BuildOptions` field
    (``precision="fp32"``, ``backend="lite"``, ``no_cache=True`` ...).
    Raises ConfigError (bad input) or PassError (a pass failed). The output directory is
    written whole or not at all.
    """
    from .passes.base import PADDLE_FLOAT, PassContext

    project = load_project(project_dir)
    opts, profile = BuildOptions.of(options, **overrides), load_target(target)
    plan = opts.resolve(profile, project)       # the backend too: a PIR program goes to onnx
    profile, backend, precision = plan.target, plan.backend, plan.precision
    # Check the data before spending minutes on export.
    data = {which: project.load_data(which) for which in ("calibration", "evaluation")}
    for which, arrays in data.items():
        check_data(project, which, arrays)
    check_weights(project)
    labels = data["evaluation"].get("labels")
    source = project_artifact(project)
    out_dir = Path(out) if out else default_out_dir(project, profile, backend, precision)
    check_out_dir(out_dir)
    cache = open_cache(plan)                # the local cache, and the remote one behind it
    # One build at a time into one --out: a second waits for the lock (a progress line), then
    # builds and replaces the first's build whole; never two writers in one directory.
    t0, waited = time.monotonic(), []

    def on_wait(line: str) -> None:         # the progress line: a step named by the wait
        waited.append(line)
        if on_event is not None:
            on_event(line, "start", {"wait": True})

    with out_lock(out_dir, timeout_s=_lock_timeout(), on_wait=on_wait):
        if waited:
            if on_event is not None:
                on_event(waited[0], "done", {"source": "built", "seconds": time.monotonic() - t0, "wait": True})
            check_out_dir(out_dir)              # what the other build left there
        with tempfile.TemporaryDirectory(prefix="edgeforge-build-") as work:
            ctx = PassContext(project=project, target=profile, backend=backend, precision=precision,
                              workdir=Path(work), log=log or (lambda m: None))
            final, steps, fallback = _run_routes(project, plan, cache, source, ctx,
                                                 _after_export(project, labels, ctx, on_event))
            manifest = build_manifest(project, plan, final, steps, toolchain_versions())
            if plan.backend_reason:
                manifest["backend_reason"] = plan.backend_reason
            exported = ctx.history.get(PADDLE_FLOAT)
            manifest["export"] = exported.meta.export if exported is not None else None
            if fallback and manifest["export"] is not None:
                manifest["export"] = dict(manifest["export"], route_fallback=fallback)
            _write_out(out_dir, final, manifest, logs=Path(work))
    return BuildResult(out_dir, manifest)


__all__ = ["build", "BuildOptions", "BuildResult", "read_manifest", "plan_passes",
           "resolve_precision", "BUILD_SCHEMA", "EdgeforgeError"]


def check(project_dir: str | Path, target: str, *, backend: str | None = None) -> dict:
    """Pre-flight: export (cached), legalize, and list the ops the target cannot take."""
    from .passes import legalize
    from .paddle_env import is_pir
    from .passes.base import PassContext
    from .options import resolve_backend
    from .passes.export import ExportPass, routes_for

    project = load_project(project_dir)
    profile = load_target(target)
    backend = resolve_backend(profile, backend, project)[0]
    routes_for(project, backend, profile)          # a PIR program for Lite: refused, naming what works
    bcfg = profile.backend_config(backend)
    vt = list(getattr(bcfg, "valid_targets", []))
    with tempfile.TemporaryDirectory(prefix="edgeforge-check-") as work:
        ctx = PassContext(project=project, target=profile, backend=backend,
                          precision=profile.precision_for(backend), workdir=Path(work))
        exported, _ = Pipeline([ExportPass()], Cache()).run(project_artifact(project), ctx)
        if is_pir(exported.path):
            raise ConfigError(f"check reads legacy programs; {project.spec.model.inference} is a PIR program "
                              "(.json), which has no pre-flight", hint=f"build it: edgeforge build --target "
                              f"{profile.name} converts it with paddle2onnx and names any op it cannot take")
        legal = Path(work) / "legal"
        legal.mkdir()
        rewrites = legalize.legalize_model(exported.path, legal, backend, vt)
        findings = legalize.preflight(legal, backend, vt)
        num_ops = _count_ops(legal)
    return {"name": project.name, "target": profile.name, "backend": backend, "rewrites": rewrites,
            "findings": [f.__dict__ if hasattr(f, "__dict__") else dict(f) for f in findings], "num_ops": num_ops}


def _count_ops(model_dir: Path) -> int:
    from .paddle_env import load_program, private_scope, static_mode

    with static_mode() as paddle, private_scope(paddle) as (_, exe):
        prog, _, _ = load_program(model_dir, exe)
        return sum(1 for op in prog.global_block().ops if op.type not in ("feed", "fetch"))
