"""Exported inference models as a project's model: ``[model] inference = "path/prefix"``.

A legacy program (``prefix.pdmodel`` + ``prefix.pdiparams``, as PaddleClas, PaddleDetection and
PaddleOCR's ``tools/export_model.py`` write it under ``FLAGS_enable_pir_api=0``) is read in a
child process (:func:`edgeforge.native.run_native`: a program that crashes Paddle ends the child,
not edgeforge) for its inputs (names, dtypes, shapes: ``[[model.inputs]]`` may narrow them and
must agree) and, in the export pass, probed and copied as the float program.

A PIR program (``prefix.json`` + ``prefix.pdiparams``, Paddle 3's default export) is read the
same way under Paddle's ``IrGuard`` and goes to the ONNX backends (paddle2onnx 2.1 reads it; a
target whose default is Lite but offers ONNX builds it there, :func:`edgeforge.options.resolve_backend`);
for Paddle Lite, which reads only the legacy ProgramDesc, it is refused in one line naming what
works (docs/export.md). When both files are there, the legacy one is used.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from .errors import ConfigError, PassError

_READ_TIMEOUT_S = 600
RANGES = ("min_shape", "opt_shape", "max_shape")      # a free dimension's range (project.InputSpec)


def pir_program(project) -> Path | None:
    """The PIR program (``prefix.json``) of a project's exported inference model, or None (a
    legacy program, or a factory: edgeforge exports that itself, in either format)."""
    if project.inference is None:
        return None
    model = program_files(project.inference)[0]
    return model if model.suffix == ".json" else None


def program_files(prefix: Path, key: str = "[model] inference") -> tuple[Path, Path]:
    """``(prefix.pdmodel or prefix.json, prefix.pdiparams)``, or one ConfigError saying what is
    there instead."""
    model, params = Path(f"{prefix}.pdmodel"), Path(f"{prefix}.pdiparams")
    key = _given(key, prefix)
    if not model.is_file() and Path(f"{prefix}.json").is_file():
        model = Path(f"{prefix}.json")
    if not model.is_file():
        if prefix.is_dir() and any((prefix / f"inference{x}").is_file() for x in (".pdmodel", ".json")):
            raise ConfigError(f"{key} is a directory",
                              hint=f"name the prefix, not the directory: {prefix / 'inference'}")
        raise ConfigError(f"{key}: no {model.name} there",
                          hint="give the path prefix of an exported model (prefix.pdmodel or prefix.json, "
                               "+ prefix.pdiparams)")
    if not params.is_file():
        raise ConfigError(f"{key}: {model.name} has no {params.name} beside it",
                          hint="export writes both: copy the .pdiparams file next to the .pdmodel")
    return model, params


def _given(key: str, prefix: Path) -> str:
    """How the user gave the prefix: ``--from-inference P`` or ``[model] inference = P``."""
    return f"{key} {prefix}" if key.startswith("--") else f"{key} = {prefix}"


def _dtype(paddle, var) -> str:
    from paddle.base.data_feeder import convert_dtype

    return str(convert_dtype(var.dtype))


def read_program(prefix: str, probe_dir: str | None = None, probe_shapes: dict | None = None) -> dict:
    """The child's job: load the program, return its inputs (feed order) and outputs; with
    ``probe_dir``, also run it once on zeros (free dimensions = 1, or ``probe_shapes[name]``: a
    declared range's opt) for the output shapes and copy both files there as ``model.pdmodel`` /
    ``model.pdiparams``. Errors come back as ``{"error": message}``, a result as ``{"ok": {...}}``."""
    import contextlib

    import numpy as np

    from .paddle_env import import_paddle, private_scope, static_mode

    pir = not Path(f"{prefix}.pdmodel").is_file() and Path(f"{prefix}.json").is_file()
    try:
        if pir:
            import_paddle()
            from paddle.pir_utils import IrGuard
        with (IrGuard() if pir else contextlib.nullcontext()), static_mode() as paddle, \
                private_scope(paddle) as (_, exe):
            prog, feeds, fetches = paddle.static.load_inference_model(prefix, exe)
            inputs = _pir_inputs(paddle, prog, feeds) if pir else _legacy_inputs(paddle, prog, feeds)
            result = {"inputs": inputs, "outputs": [_name(f, i) for i, f in enumerate(fetches)]}
            if probe_dir is not None:
                shapes = probe_shapes or {}
                zeros = {s["name"]: np.zeros(shapes.get(s["name"]) or [1 if d < 0 else d for d in s["shape"]],
                                             s["dtype"]) for s in inputs}
                outs = exe.run(prog, feed=zeros, fetch_list=fetches)
                result["output_shapes"] = [list(np.asarray(o).shape) for o in outs]
    except Exception as exc:  # noqa: BLE001 - any failure to load or run the program
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        return {"error": f"{type(exc).__name__}: {(lines[-1] if lines else '')[:300]}"}
    if probe_dir is not None:
        out = Path(probe_dir)
        suffix = ".json" if pir else ".pdmodel"
        shutil.copyfile(f"{prefix}{suffix}", out / f"model{suffix}")
        shutil.copyfile(f"{prefix}.pdiparams", out / "model.pdiparams")
    return {"ok": result}


def _legacy_inputs(paddle, prog, feeds) -> list[dict]:
    block = prog.global_block()
    return [{"name": n, "shape": [int(d) for d in block.var(n).shape], "dtype": _dtype(paddle, block.var(n))}
            for n in feeds]


def _pir_inputs(paddle, prog, feeds) -> list[dict]:
    """A PIR program's feeds, from its ``pd_op.data`` ops (name, shape, dtype)."""
    data = {op.attrs().get("name"): op.result(0) for op in prog.global_block().ops if op.name() == "pd_op.data"}
    return [{"name": n, "shape": [int(d) for d in data[n].shape], "dtype": _dtype(paddle, data[n])}
            for n in feeds]


def _name(fetch, i: int) -> str:
    try:
        name = fetch.name
        return str(name() if callable(name) else name)
    except (ValueError, RuntimeError, AttributeError):     # a PIR value without a name
        return f"output_{i}"


def run_read(prefix: Path, log_path: Path, probe_dir: Path | None = None, pass_name: str = "export",
             key: str = "[model] inference", probe_shapes: dict | None = None) -> dict:
    """:func:`read_program` in a child process; a program Paddle cannot load is a ConfigError."""
    from .native import run_native

    program_files(prefix, key)
    result = run_native(pass_name, f"the inference model {prefix}", read_program,
                        (str(prefix), None if probe_dir is None else str(probe_dir), probe_shapes), log_path,
                        timeout=_READ_TIMEOUT_S,
                        hint="the program ended the Paddle process that loaded it; load it by hand "
                             "with paddle.static.load_inference_model to see why")
    if "error" in result:
        raise ConfigError(f"{_given(key, prefix)}: Paddle cannot load it: {result['error']}",
                          hint="check it is an inference program written by paddle.jit.save or a toolkit's export_model.py")
    return result["ok"]


def agree(program: list[dict], declared: list[dict], where: str) -> list[dict]:
    """The inputs a build uses: the program's, narrowed by ``[[model.inputs]]`` where given
    (a free dimension -1 may be fixed; a name, dtype, rank or fixed size that differs is a
    ConfigError naming the input). A -1 kept beyond the batch takes the declared input's
    ``min_shape``/``opt_shape``/``max_shape`` (edgeforge.project.InputSpec checks them)."""
    if not declared:
        return program
    by_name = {s["name"]: s for s in program}
    names = [s["name"] for s in program]
    if sorted(d["name"] for d in declared) != sorted(names):
        raise ConfigError(f"{where}: [[model.inputs]] names {[d['name'] for d in declared]}, the program "
                          f"takes {names}", hint="name every input of the program, or drop [[model.inputs]]")
    out = []
    for name in names:
        p, d = by_name[name], next(d for d in declared if d["name"] == name)
        if d["dtype"] != p["dtype"]:
            raise ConfigError(f"{where}: input '{name}' is {d['dtype']} in [[model.inputs]], the program "
                              f"takes {p['dtype']}", hint=f"use dtype = \"{p['dtype']}\"")
        if len(d["shape"]) != len(p["shape"]) or any(pd >= 0 and dd != pd for pd, dd in zip(p["shape"], d["shape"])):
            raise ConfigError(f"{where}: input '{name}' has shape {d['shape']} in [[model.inputs]], the "
                              f"program takes {p['shape']}",
                              hint="keep the program's sizes; only a -1 may be given a size")
        out.append(dict(p, shape=list(d["shape"]), **{k: list(d[k]) for k in RANGES if d.get(k) is not None}))
    return out


def export_inference(prefix: Path, out_dir: Path, log_path: Path, probe_shapes: dict | None = None) -> dict:
    """The export pass for an inference model: probe it (at ``probe_shapes``: {name: shape}) and
    copy it as the float program."""
    read = run_read(prefix, log_path, probe_dir=out_dir, probe_shapes=probe_shapes)
    if not any((out_dir / f"model{x}").is_file() for x in (".pdmodel", ".json")):
        raise PassError("export", f"copying {prefix}'s program into the build failed")
    return read
