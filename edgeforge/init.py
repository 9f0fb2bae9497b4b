"""``edgeforge init [DIR]``: write a working edgeforge.toml, say what is still missing.

The model comes from an exported inference model (``from_inference``: its inputs are read from
the program) or a factory (``factory``: the inputs from its ``forward``'s InputSpecs, either
``@paddle.jit.to_static(input_spec=[...])`` or ``InputSpec`` annotations, else ``inputs`` given
as ``name:shape:dtype``). ``data`` turns a folder into the calibration and evaluation files
(:mod:`edgeforge.init_data`). init never overwrites a file: one that exists is exit 2, named,
before anything is written.
"""
from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import tempfile
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from .errors import ConfigError
from .stop_signals import signals_held
from .fsutil import writable_dir, write_files_atomic
from .inference import RANGES
from .init_data import MAX_SAMPLE_ELEMENTS, SPLIT, DataSource
from .init_toml import TomlDoc, check, check_input_name, one_line, render
from .oserror import os_error_text
from .manifest import TENSOR_NAME, TENSOR_NAME_WORDS
from .project import PROJECT_FILE

CALIB, EVAL = "data/calib.npz", "data/eval.npz"
DTYPES = ("float32", "float16", "int64", "int32", "uint8")
TASKS = ("classification", "detection", "segmentation", "ctc")
__all__ = ["DataSource", "InitResult", "ModelSource", "init_project", "parse_input"]


@dataclass
class InitResult:
    root: Path
    written: list[Path] = field(default_factory=list)
    inputs: list[dict] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    next_step: str = ""


@dataclass
class ModelSource:
    """Where init takes the model from: one of ``from_inference`` and ``factory``."""
    from_inference: str | None = None
    factory: str | None = None
    weights: str | None = None
    inputs: list[str] = field(default_factory=list)      # name:shape:dtype


def parse_input(text: str) -> dict:
    """``x:-1,1,32,32:float32`` (dtype optional, float32) -> an input spec."""
    parts = text.split(":")
    name = ":".join(parts[:-2]) if len(parts) > 3 else parts[0]
    parts = [name, *parts[-2:]] if len(parts) > 3 else parts
    if len(parts) not in (2, 3) or not TENSOR_NAME.match(parts[0]):
        raise ConfigError(f"--input {one_line(repr(text))}: write it as name:shape:dtype, e.g. x:-1,3,224,224:float32 "
                          f"(the name: {TENSOR_NAME_WORDS})")
    try:
        shape = [int(d) for d in parts[1].replace("x", ",").split(",") if d.strip()]
    except ValueError:
        raise ConfigError(f"--input {one_line(repr(text))}: the shape is integers separated by commas (-1: free)") from None
    if not shape or any(d == 0 or d < -1 for d in shape):
        raise ConfigError(f"--input {one_line(repr(text))}: dimensions must be positive, or -1 for a free one")
    dtype = parts[2] if len(parts) == 3 else "float32"
    if dtype not in DTYPES:
        raise ConfigError(f"--input {one_line(repr(text))}: dtype {one_line(repr(dtype))} is not one of {', '.join(DTYPES)}")
    spec = {"name": parts[0], "shape": shape, "dtype": dtype}
    check_sample(spec, "--input")
    return spec


def check_sample(spec: dict, where: str) -> None:
    """One sample of ``spec`` (free dimensions at 1) within :data:`MAX_SAMPLE_ELEMENTS`."""
    sample = [max(d, 1) for d in spec["shape"][1:]]
    if math.prod(sample) > MAX_SAMPLE_ELEMENTS:
        raise ConfigError(f"{where}: input '{spec['name']}' {spec['shape']}: one sample has {math.prod(sample):.3g} "
                          f"elements, more than init takes ({MAX_SAMPLE_ELEMENTS:,})", hint="check the shape")


def factory_inputs(root: str, factory: str) -> dict:
    """The child's job: the InputSpecs of ``factory()``'s forward, or ``{"ok": []}`` if none."""
    import inspect

    from .paddle_env import import_paddle
    from .passes.export import import_factory

    try:
        paddle = import_paddle()
        layer = import_factory(Path(root), factory)()
        fwd = type(layer).forward
        specs = list(getattr(fwd, "_input_spec", None) or [])
        if not specs:
            params = list(inspect.signature(fwd).parameters.values())[1:]
            specs = [p.annotation for p in params if isinstance(p.annotation, paddle.static.InputSpec)]
            if len(specs) != len(params):
                specs = []
        out = []
        for i, s in enumerate(specs):
            dtype = str(s.dtype).replace("paddle.", "")
            out.append({"name": s.name or f"x{i}", "shape": [-1 if d in (None, -1) else int(d) for d in s.shape],
                        "dtype": dtype})
        return {"ok": out}
    except Exception as exc:  # noqa: BLE001 - the user's code: reported as one line
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}


def _rel(path: Path, root: Path) -> str:
    path = path.resolve()
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return os.path.relpath(path, root.resolve()) if path.anchor == root.resolve().anchor else str(path)


def _unranged(spec: dict) -> bool:
    """A free dimension beyond the batch and no declared range for it."""
    return any(d == -1 for d in spec["shape"][1:]) and not spec.get("min_shape")


@contextmanager
def _child_log(name: str) -> Iterator[Path]:
    """A log path for a child process, in a fresh temporary directory that is removed when the
    child's work is done, and kept when an error names its log (the line then points at a file
    that exists)."""
    tmp = Path(tempfile.mkdtemp(prefix="edgeforge-init-"))
    log = tmp / name
    try:
        yield log
    except BaseException as exc:
        if str(log) not in str(exc):
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)


def check_factory(factory: str, root: Path) -> None:
    """``factory`` is written module:Class (ConfigError otherwise)."""
    if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", factory):
        raise ConfigError(f"--factory {one_line(repr(factory))}: write it as module:Class (importable from {root})")


def declared_inputs(root: Path, factory: str, verb: str) -> list[dict]:
    """The inputs ``factory``'s forward declares (InputSpecs), read in a child process; none
    declared is a ConfigError asking for ``--input``. A failure's log is kept where a line names it."""
    from .native import run_native

    with _child_log("factory.log") as log:
        got = run_native(verb, f"factory '{factory}'", factory_inputs, (str(root.resolve()), factory),
                         log, timeout=600, hint=f"{verb} imports it from DIR in a child process: see {log}")
        if "error" in got:
            raise ConfigError(f"--factory {factory}: {one_line(got['error'])}",
                              hint=f"{verb} imports it from DIR: check the module and the class")
    if not got["ok"]:
        raise ConfigError(f"{factory}'s forward declares no InputSpec: give its inputs",
                          hint="--input name:shape:dtype per input, e.g. --input x:-1,3,224,224:float32")
    return got["ok"]


def _model_inputs(root: Path, source: ModelSource, given: list[dict], res: InitResult) -> tuple[dict, dict, bool]:
    """The [model] keys, their comments, and whether the inputs are declared; ``res.inputs`` set."""
    from .inference import run_read

    if source.from_inference is not None:
        prefix = Path(source.from_inference).expanduser().resolve()
        with _child_log("read.log") as log:
            program = run_read(prefix, log, pass_name="init", key="--from-inference")["inputs"]
        from .inference import agree

        res.inputs = agree(program, given, "--input") if given else program
        return ({"inference": _rel(prefix, root)},
                {"model.inference": "an exported prefix.pdmodel or .json + prefix.pdiparams"},
                bool(given) or any(_unranged(s) for s in res.inputs))   # declared: the ranges go there
    factory = source.factory
    check_factory(factory, root)
    res.inputs = given or declared_inputs(root, factory, "init")
    keys, comments = {"factory": factory}, {"model.factory": "module:callable returning a paddle.nn.Layer"}
    if source.weights is not None:
        w = Path(source.weights).expanduser()
        keys["weights"] = _rel(w, root)
        if not (w if w.is_absolute() else root / w).is_file():
            res.missing.append(f"the weights file {one_line(source.weights)} (not there yet)")
    else:
        res.missing.append("weights: none given, the factory's own initial parameters are built "
                           "(add weights = \"F.pdparams\" under [model])")
    return keys, comments, True


def _document(name: str, model: tuple[dict, dict, bool], inputs: list[dict], task: dict) -> TomlDoc:
    keys, comments, declared = model
    doc = TomlDoc(tables={"": {"name": name}, "model": dict(keys),
                          "data": {"calibration": CALIB, "evaluation": EVAL}}, comments=dict(comments))
    if declared:
        doc.inputs = [{k: s[k] for k in ("name", "shape", "dtype", *RANGES) if s.get(k)} for s in inputs]
        for s in inputs:
            if _unranged(s):
                doc.notes[f"input:{s['name']}"] = ["a free dimension beyond the batch needs its range: min_shape = "
                                                   "[...], opt_shape = [...], max_shape = [...] (docs/export.md "
                                                   "\"Free dimensions\")"]
    else:
        doc.notes["model"] = ["inputs, from the program: " + "; ".join(f"{s['name']} {s['shape']} {s['dtype']}"
                                                                      for s in inputs)]
    if task:
        doc.tables["task"] = dict(task)
    return doc


def _write_new(root: Path, files: dict[str, bytes | str]) -> list[Path]:
    """Write ``files`` (relative to ``root``) together: each complete beside its place, then all
    renamed in; on any failure or signal, none of them is left, nor a temporary. A signal waits
    while the files are written (bounded: MAX_DATA_BYTES), so it never falls between a
    temporary's creation and its record; one that came is raised after, here."""
    paths = {root / rel: content for rel, content in files.items()}
    try:
        with signals_held():
            write_files_atomic(paths)
    except BaseException:
        for p in paths:
            p.unlink(missing_ok=True)
        raise
    return list(paths)


def _project_name(name: str | None, root: Path) -> str:
    proj = name if name is not None else (re.sub(r"[^A-Za-z0-9_.-]", "-", root.resolve().name).lstrip("-_.")
                                          or "model")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", proj):
        raise ConfigError(f"--name {one_line(repr(proj))}: use letters, digits, _ . - (at most 128), "
                          "starting with a letter or digit")
    return proj


def _check_args(root: Path, source: ModelSource, data: DataSource | None, task: str | None) -> None:
    paths = {"DIR": str(root), "--from-inference": source.from_inference, "--weights": source.weights,
             "--data": data and data.folder, "--labels": data and data.labels}
    for flag, value in paths.items():
        if value is not None and ("\x00" in value or not value.strip()):
            raise ConfigError(f"{flag} {one_line(repr(value))}: not a path (empty, or a NUL byte in it)")
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} is a file, not a directory")
    if (source.from_inference is None) == (source.factory is None):
        raise ConfigError("init needs the model: --from-inference PREFIX (an exported prefix.pdmodel or prefix.json) "
                          "or --factory module:Class")
    if source.weights is not None and source.factory is None:
        raise ConfigError("--weights goes with --factory (an inference model holds its parameters)")
    if task is not None and task not in TASKS:
        raise ConfigError(f"--task {one_line(repr(task))}: one of {', '.join(TASKS)}")
    for rel in [PROJECT_FILE] + ([CALIB, EVAL, SPLIT] if data else []):
        if (root / rel).exists() or (root / rel).is_symlink():
            raise ConfigError(f"init never overwrites a file: {one_line(root / rel)} exists",
                              hint="move it away, or init another directory")


def _created_dirs(root: Path) -> list[Path]:
    """The directories init would create for ``root``/data, deepest first."""
    out, p = [], (root / "data").absolute()
    while not p.exists():
        out.append(p)
        p = p.parent
    return out


def _data(data: DataSource, res: InitResult) -> tuple[dict, dict, dict]:
    """The data files (relative path -> bytes), the [task] keys and the [data] comments."""
    from .init_data import make_data
    from .init_labels import task_labels

    rep, files = make_data(data, res.inputs, CALIB, EVAL, lambda got: task_labels(
        data.task, data.labels, got, res.inputs[0], data.charset))
    folder = one_line(data.folder)
    labelled = f", {rep.labelled}" if rep.labelled else ", no labels"
    res.notes.append(f"data: {rep.calibration} calibration + {rep.evaluation} evaluation samples "
                     f"(1:2, seed {data.seed}, sources in {SPLIT}){labelled}")
    res.notes.append(f"pre-processing: {rep.preprocessing}")
    res.notes += rep.notes
    if not rep.labelled:
        res.notes.append("no labels: verify compares outputs by cosine (sub-folders per class give "
                         "accuracy; --task with --labels the task's metric)")
    comments = {"data.calibration": f"{rep.calibration} samples from {folder}",
                "data.evaluation": f"{rep.evaluation} samples{labelled}; sources: {SPLIT}"}
    return files, rep.task, comments


def init_project(directory: str | Path, source: ModelSource, data: DataSource | None = None, *,
                 name: str | None = None, target: str = "linux-x86", task: str | None = None,
                 max_metric_drop: float | None = None) -> InitResult:
    """Write DIR/edgeforge.toml (and, with ``data``, DIR/data/*.npz and data/split.json). See the
    module doc. Everything the build would refuse is refused before anything is written; a
    failure or a signal leaves nothing behind: no file, no directory init made. A file system
    that refuses (a name too long, no space, no permission) is one line, exit 2."""
    try:
        return _init_project(Path(directory).expanduser(), source, data, name=name, target=target, task=task,
                             max_metric_drop=max_metric_drop)
    except OSError as exc:
        raise ConfigError(f"init: {one_line(os_error_text(exc))}") from None


def _init_project(root: Path, source: ModelSource, data: DataSource | None, *, name: str | None, target: str,
                  task: str | None, max_metric_drop: float | None) -> InitResult:
    _check_args(root, source, data, task)
    writable_dir(root, "DIR", what="the project directory", create=False)
    res = InitResult(root=root)
    proj_name = _project_name(name, root)
    given = [parse_input(t) for t in source.inputs]
    model = _model_inputs(root, source, given, res)
    for s in res.inputs:
        check_input_name(s["name"], "init")
        if s["dtype"] not in DTYPES:
            raise ConfigError(f"init: input '{s['name']}' is {one_line(s['dtype'])}; the build takes {', '.join(DTYPES)}",
                              hint="cast it in the model, or give --input name:shape:dtype")
        check_sample(s, "init")
    task_keys = {"kind": task} if task is not None else {}
    check(_document(proj_name, model, res.inputs, task_keys))
    made = _created_dirs(root)
    try:
        files: dict[str, bytes | str] = {}
        comments = {}
        if data is not None:
            data.task = task
            files, task_keys, comments = _data(data, res)
        else:
            labels = ("`labels` in the evaluation file" if task in (None, "classification")
                      else f"the {task} labels of docs/task.md in the evaluation file")
            again = "--data DIR" + ("" if task in (None, "classification") else f" --task {task} --labels L")
            res.missing.append(f"data: {CALIB} and {EVAL} (one array per input name, first axis = samples; "
                               f"{labels}) or init again with {again}")
        free = [s["name"] for s in res.inputs if _unranged(s)]
        if free:
            res.missing.append(f"the ranges of {', '.join(free)}'s free dimensions beyond the batch: add min_shape, "
                               "opt_shape and max_shape under its [[model.inputs]] (docs/export.md \"Free dimensions\")")
        if max_metric_drop is not None:
            task_keys = {"kind": task, **task_keys, "max_metric_drop": max_metric_drop}
        doc = _document(proj_name, model, res.inputs, task_keys)
        doc.comments.update(comments)
        files = {PROJECT_FILE: render(doc), **files}
        root.mkdir(parents=True, exist_ok=True)
        res.written = _write_new(root, files)
    except BaseException:
        for d in made:
            with suppress(OSError):
                d.rmdir()
        raise
    where = "" if root.resolve() == Path.cwd().resolve() else f"{one_line(shlex.quote(str(root)))} "
    res.next_step = f"edgeforge build {where}--target {one_line(shlex.quote(target))}"
    return res
