"""``edgeforge init [DIR]``: write a working edgeforge.toml, say what is still missing.

The model comes from an exported inference model (``from_inference``: its inputs are read from
the program) or a factory (``factory``: the inputs from its ``forward``'s InputSpecs, either
``@paddle.jit.to_static(input_spec=[...])`` or ``InputSpec`` annotations, else ``inputs`` given
as ``name:shape:dtype``). ``data`` turns a folder into the calibration and evaluation files
(:mod:`edgeforge.init_data`). init never overwrites a file: one that exists is exit 2, named,
before anything is written.
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .project import PROJECT_FILE

CALIB, EVAL = "data/calib.npz", "data/eval.npz"
DTYPES = ("float32", "float16", "int64", "int32", "uint8")


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


@dataclass
class DataSource:
    """``--data DIR`` and how its images are pre-processed."""
    folder: str
    mean: str | None = None
    std: str | None = None
    resample: str = "bilinear"


def parse_input(text: str) -> dict:
    """``x:-1,1,32,32:float32`` (dtype optional, float32) -> an input spec."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:/-]*", parts[0]):
        raise ConfigError(f"--input {text!r}: write it as name:shape:dtype, e.g. x:-1,3,224,224:float32")
    try:
        shape = [int(d) for d in parts[1].replace("x", ",").split(",") if d.strip()]
    except ValueError:
        raise ConfigError(f"--input {text!r}: the shape is integers separated by commas (-1: free)") from None
    if not shape or any(d == 0 or d < -1 for d in shape):
        raise ConfigError(f"--input {text!r}: dimensions must be positive, or -1 for a free one")
    dtype = parts[2] if len(parts) == 3 else "float32"
    if dtype not in DTYPES:
        raise ConfigError(f"--input {text!r}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return {"name": parts[0], "shape": shape, "dtype": dtype}


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


def check_factory(factory: str, root: Path) -> None:
    if not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", factory):
        raise ConfigError(f"--factory {factory!r}: write it as module:Class (importable from {root})")


def declared_inputs(root: Path, factory: str, verb: str) -> list[dict]:
    """The inputs ``factory``'s forward declares (InputSpecs), read in a child process; none
    declared is a ConfigError asking for ``--input``."""
    from .native import run_native

    with tempfile.TemporaryDirectory(prefix=f"edgeforge-{verb}-") as tmp:
        got = run_native(verb, f"factory '{factory}'", factory_inputs, (str(root.resolve()), factory),
                         Path(tmp) / "factory.log", timeout=600)
    if "error" in got:
        raise ConfigError(f"--factory {factory}: {got['error']}",
                          hint=f"{verb} imports it from DIR: check the module and the class")
    if not got["ok"]:
        raise ConfigError(f"{factory}'s forward declares no InputSpec: give its inputs",
                          hint="--input name:shape:dtype per input, e.g. --input x:-1,3,224,224:float32")
    return got["ok"]


def _rel(path: Path, root: Path) -> str:
    path = path.resolve()
    try:
        return path.relative_to(root.resolve()).as_posix()
    except ValueError:
        return os.path.relpath(path, root.resolve()) if path.anchor == root.resolve().anchor else str(path)


def _unranged(spec: dict) -> bool:
    """A free dimension beyond the batch and no declared range for it."""
    return any(d == -1 for d in spec["shape"][1:]) and not spec.get("min_shape")


def _toml(name: str, model: list[str], inputs: list[dict], declared: bool, data: list[str]) -> str:
    lines = [f'name = "{name}"', "", "[model]", *model]
    if not declared:
        lines += ["# inputs, from the program: " + "; ".join(f"{s['name']} {s['shape']} {s['dtype']}" for s in inputs)]
    for s in inputs if declared else []:
        lines += ["", "[[model.inputs]]", f'name = "{s["name"]}"', f"shape = {s['shape']}", f'dtype = "{s["dtype"]}"']
        lines += [f"{k} = {s[k]}" for k in ("min_shape", "opt_shape", "max_shape") if s.get(k)]
        if _unranged(s):
            lines += ["# a free dimension beyond the batch needs its range: min_shape = [...], opt_shape = [...], "
                      "max_shape = [...] (docs/export.md \"Free dimensions\")"]
    lines += ["", "[data]", *data, ""]
    return "\n".join(lines)


def init_project(directory: str | Path, source: ModelSource, data: DataSource | None = None, *,
                 name: str | None = None, target: str = "linux-x86") -> InitResult:
    """Write DIR/edgeforge.toml (and, with ``data``, DIR/data/*.npz). See the module doc."""
    from .inference import run_read

    from_inference, factory, weights, inputs = source.from_inference, source.factory, source.weights, source.inputs

    root = Path(directory).expanduser()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root} is a file, not a directory")
    if (from_inference is None) == (factory is None):
        raise ConfigError("init needs the model: --from-inference PREFIX (an exported prefix.pdmodel or prefix.json) "
                          "or --factory module:Class")
    if weights is not None and factory is None:
        raise ConfigError("--weights goes with --factory (an inference model holds its parameters)")
    targets = [root / PROJECT_FILE] + ([root / CALIB, root / EVAL] if data else [])
    for t in targets:
        if t.exists():
            raise ConfigError(f"init never overwrites a file: {t} exists",
                              hint="move it away, or init another directory")
    res = InitResult(root=root)
    given = [parse_input(t) for t in inputs]
    model: list[str]
    if from_inference is not None:
        prefix = Path(from_inference).expanduser().resolve()
        with tempfile.TemporaryDirectory(prefix="edgeforge-init-") as tmp:
            program = run_read(prefix, Path(tmp) / "read.log", pass_name="init", key="--from-inference")["inputs"]
        from .inference import agree

        res.inputs = agree(program, given, "--input") if given else program
        model = [f'inference = "{_rel(prefix, root)}"   # an exported prefix.pdmodel or .json + prefix.pdiparams']
    else:
        check_factory(factory, root)
        res.inputs = given or declared_inputs(root, factory, "init")
        model = [f'factory = "{factory}"   # module:callable returning a paddle.nn.Layer']
        if weights is not None:
            w = Path(weights).expanduser()
            model.append(f'weights = "{_rel(w, root)}"')
            if not (w if w.is_absolute() else root / w).is_file():
                res.missing.append(f"the weights file {weights} (not there yet)")
        else:
            res.missing.append("weights: none given, the factory's own initial parameters are built "
                               "(add weights = \"F.pdparams\" under [model])")
    proj_name = name or re.sub(r"[^A-Za-z0-9_.-]", "-", root.resolve().name).lstrip("-_.") or "model"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", proj_name):
        raise ConfigError(f"--name {proj_name!r}: use {'letters, digits, _ . -'}, starting with a letter or digit")
    root.mkdir(parents=True, exist_ok=True)
    datalines = [f'calibration = "{CALIB}"', f'evaluation = "{EVAL}"']
    if data is not None:
        from .init_data import make_data

        rep = make_data(Path(data.folder).expanduser(), res.inputs, root / CALIB, root / EVAL, mean=data.mean,
                        std=data.std, resample=data.resample)
        res.written += [root / CALIB, root / EVAL]
        labelled = f", labels from {len(rep.classes)} sub-folders" if rep.classes else ", no labels"
        datalines = [f'calibration = "{CALIB}"   # {rep.calibration} samples from {data.folder}',
                     f'evaluation = "{EVAL}"     # {rep.evaluation} samples{labelled}']
        res.notes.append(f"data: {rep.calibration} calibration + {rep.evaluation} evaluation samples "
                         f"(1:2){labelled}")
        res.notes.append(f"pre-processing: {rep.preprocessing}")
        if not rep.classes:
            res.notes.append("no labels: verify compares outputs by cosine (sub-folders per class give "
                             "accuracy)")
    else:
        res.missing.append(f"data: {CALIB} and {EVAL} (one array per input name, first axis = samples; "
                           "`labels` in the evaluation file) or init again with --data DIR")
    free = [s["name"] for s in res.inputs if _unranged(s)]
    if free:
        res.missing.append(f"the ranges of {', '.join(free)}'s free dimensions beyond the batch: add min_shape, "
                           "opt_shape and max_shape under its [[model.inputs]] (docs/export.md \"Free dimensions\")")
    (root / PROJECT_FILE).write_text(_toml(proj_name, model, res.inputs, factory is not None or bool(given) or bool(free),
                                           datalines))
    res.written.insert(0, root / PROJECT_FILE)
    where = "" if root.resolve() == Path.cwd().resolve() else f"{root} "
    res.next_step = f"edgeforge build {where}--target {target}"
    return res
