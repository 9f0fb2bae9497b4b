"""export: jit export of the trained dygraph model to a static inference program, or, for
``[model] inference = "prefix"``, that exported program itself (:mod:`edgeforge.inference`).

Two program formats (the route, ``ExportConfig.route``, part of the cache key): ``legacy``
(``model.pdmodel``, a ProgramDesc: Paddle Lite and Paddle's PTQ read only this) and ``pir``
(``model.json``, Paddle 3's PIR program, for paddle2onnx >= 2: recurrent layers and
``multiclass_nms3`` export only this way). A PIR export that fails falls back to the legacy one
in the same child, and the record says why (``export.route_note``).

The user's factory (their code) runs in a child process (:func:`edgeforge.native.run_native`):
a factory that calls ``sys.exit`` or crashes the interpreter becomes one ``PassError`` line
naming the factory and what happened, not the end of edgeforge. Paddle 3.2+'s C++-routed APIs
(sigmoid, matmul, ...) are patched for the export (:mod:`.export_compat`, docs/export.md).
"""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Literal

from ..errors import ConfigError, EdgeforgeError, PassError
from ..inference import pir_program
from ..native import run_native
from .base import PADDLE_FLOAT, PROJECT, Artifact, Pass, PassConfig, PassContext, register

_EXPORT_TIMEOUT_S = 1800


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.strip().startswith("[")]
    # paddle errors put the useful line near the end, after a C++ stack
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln or "mismatch" in ln or "match" in ln:
            return ln[:300]
    return (lines[-1] if lines else type(exc).__name__)[:300]


def import_factory(root: Path, factory: str):
    module_name, _, attr = factory.partition(":")
    sys.path.insert(0, str(root))
    top = module_name.split(".")[0]
    stale = {k: sys.modules.pop(k) for k in list(sys.modules) if k == top or k.startswith(top + ".")}
    try:
        module = importlib.import_module(module_name)
        fn = getattr(module, attr)
    except Exception as exc:  # noqa: BLE001 - any failure of user code to import
        raise ConfigError(
            f"factory '{factory}' failed to import: {type(exc).__name__}: {_first_line(exc)}",
            hint=f"check that {module_name.replace('.', '/')}.py in {root} imports and defines {attr}",
        ) from None
    finally:
        if sys.path and sys.path[0] == str(root):
            sys.path.pop(0)
        for k in [k for k in sys.modules if k == top or k.startswith(top + ".")]:
            sys.modules.pop(k, None)
        sys.modules.update(stale)
    return fn


def build_layer(paddle, root: Path, factory: str, weights: str | None):
    fn = import_factory(root, factory)
    try:
        layer = fn()
    except SystemExit as exc:
        raise PassError("export", f"factory '{factory}' called sys.exit({exc.code!r})",
                        hint="a model factory must return a paddle.nn.Layer, not end the process") from None
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f"factory '{factory}' raised {type(exc).__name__}: {_first_line(exc)}") from None
    if not isinstance(layer, paddle.nn.Layer):
        raise ConfigError(f"factory '{factory}' returned {type(layer).__name__}, not a paddle.nn.Layer")
    if weights is not None:
        from ..weights import load_state_dict

        name = Path(weights).name
        state = load_state_dict(Path(weights))
        own = layer.state_dict()
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        if missing or unexpected:
            raise ConfigError(
                f"weights {name} do not fit the model: "
                f"missing {missing[:3]}{'…' if len(missing) > 3 else ''}, unexpected {unexpected[:3]}{'…' if len(unexpected) > 3 else ''}",
            )
        for k, v in state.items():
            if list(own[k].shape) != list(v.shape):
                raise ConfigError(f"weights {name}: '{k}' has shape {list(v.shape)}, the model wants {list(own[k].shape)}")
        layer.set_state_dict({k: paddle.to_tensor(v) for k, v in state.items()})
    layer.eval()
    return layer


def pir_save(paddle, layer, path: str, specs: list) -> None:
    """``paddle.jit.save`` to a PIR program (``path.json``) from this legacy-IR process."""
    from paddle.pir_utils import DygraphPirGuard

    try:
        with DygraphPirGuard():
            paddle.jit.save(layer, path, input_spec=specs)
    except Exception as exc:  # noqa: BLE001 - any failure of the trace, reported as one line
        raise PassError("export", f"paddle.jit.save (PIR) failed: {_first_line(exc)}",
                        hint="make forward() traceable (no data-dependent Python control flow)") from None


def jit_save(paddle, layer, path: str, specs: list) -> dict:
    from .export_compat import legacy_apis, rnn_dropout_states

    with legacy_apis() as status, rnn_dropout_states(paddle, layer) as rnn:
        if rnn:
            status["rnn_dropout_states"] = rnn      # recurrent layers given an allocated state
        try:
            paddle.jit.save(layer, path, input_spec=specs)
        except Exception as exc:  # noqa: BLE001
            m = re.search(r"\(InvalidType\) (\w+)\(\): argument .* must be Value, but got Variable", str(exc))
            if m:
                why = (f"edgeforge's legacy-API patch is off: {status.get('reason')}" if not status["enabled"]
                       else "not covered by edgeforge's legacy-API patch")
                raise PassError(
                    "export",
                    f"op '{m.group(1)}' cannot be exported to a legacy program: Paddle {paddle.__version__} "
                    f"routes it to a PIR-only C++ binding ({why})",
                    hint=f"express {m.group(1)} with ops that export (see docs/export.md)",
                ) from None
            raise PassError("export", f"paddle.jit.save failed: {_first_line(exc)}",
                            hint="make forward() traceable (its first argument must be named self, "
                                 "no data-dependent Python control flow)") from None
    return status


def export_model(root: str, factory: str, weights: str | None, inputs: list[dict], out_dir: str,
                 route: str = "legacy", fold: dict | None = None, fallback: bool = True) -> dict:
    """The child's job: build the layer (wrapped in the ``[preprocess]`` fold, when given), probe
    it with the declared inputs, save the program of ``route`` to ``out_dir/model`` (a failed PIR
    export falls back to the legacy program unless ``fallback`` is false: ``edgeforge export
    --pir``). Returns ``{"ok": meta}`` or ``{"error": [class, message, hint]}`` (an edgeforge
    error is re-raised as itself in the parent)."""
    try:
        return {"ok": _export(Path(root), factory, weights, inputs, Path(out_dir), route, fold, fallback)}
    except EdgeforgeError as exc:
        cls = "config" if isinstance(exc, ConfigError) else "pass"
        message = exc.message
        if cls == "pass" and message.startswith("pass export: "):
            message = message[len("pass export: "):]
        return {"error": [cls, message, exc.hint]}


def _export(root: Path, factory: str, weights: str | None, inputs: list[dict], out_dir: Path, route: str,
            fold: dict | None = None, fallback: bool = True) -> dict:
    import numpy as np

    from ..paddle_env import import_paddle

    paddle = import_paddle()
    paddle.disable_static()
    layer = build_layer(paddle, root, factory, weights)
    if fold is not None:            # [preprocess] fold = true: the layer takes uint8 NHWC
        from .fold_layer import wrap

        layer = wrap(paddle, layer, fold)
    specs = [paddle.static.InputSpec([None if d == -1 else d for d in s["shape"]], s["dtype"], s["name"])
             for s in inputs]
    # Probe the model with the declared inputs first (free dimensions at their range's opt): a
    # mismatch is a configuration error.
    from ..project import probe_shape

    probe = [paddle.to_tensor(np.zeros(probe_shape(s), dtype=s["dtype"])) for s in inputs]
    try:
        with paddle.no_grad():
            out = layer(*probe)
    except Exception as exc:  # noqa: BLE001
        shapes = ", ".join(f"{s['name']}{s['shape']}" for s in inputs)
        raise ConfigError(
            f"input spec {shapes} does not match the model: {_first_line(exc)}",
            hint="fix [[model.inputs]] in edgeforge.toml to the shape the model's forward expects",
        ) from None
    outs = out if isinstance(out, (list, tuple)) else [out]
    record = {"paddle": paddle.__version__, "process": "child", "route": route}
    if route == "pir":
        try:
            pir_save(paddle, layer, str(out_dir / "model"), specs)
            if not (out_dir / "model.json").is_file():
                raise PassError("export", "paddle.jit.save (PIR) wrote no model.json")
        except PassError as exc:
            for stray in out_dir.glob("model.*"):
                stray.unlink()
            if not fallback:
                raise
            record.update(route="legacy", route_note=f"PIR export failed ({exc.message.removeprefix('pass export: ')}); "
                                                     "exported the legacy program instead")
            from ..quiet import TERMINAL

            print(f"edgeforge: {record['route_note']}", file=TERMINAL)       # not the step's log
    if record["route"] == "legacy":
        record["legacy_api_patch"] = jit_save(paddle, layer, str(out_dir / "model"), specs)
        for stray in out_dir.glob("model.pdiparams.info"):
            stray.unlink()
        if not (out_dir / "model.pdmodel").is_file():
            raise PassError("export", "paddle.jit.save wrote no legacy model.pdmodel (PIR export?)",
                            hint="set FLAGS_enable_pir_api=0 before paddle is imported")
    record["program"] = PROGRAMS[record["route"]]
    return {"inputs": inputs, "num_outputs": len(outs), "output_shapes": [list(o.shape) for o in outs],
            "export": record}


PROGRAMS = {"legacy": "legacy ProgramDesc (model.pdmodel)", "pir": "PIR program (model.json)"}


def _from_inference(project, out_dir: Path) -> dict:
    """An exported program is the float program: probed and copied, in a child."""
    from ..inference import export_inference, program_files

    model, _ = program_files(project.inference)
    route = "pir" if model.suffix == ".json" else "legacy"
    read = export_inference(project.inference, out_dir, out_dir.parent / f"{out_dir.name}.export.log",
                            probe_shapes={s.name: s.probe_shape() for s in project.inputs})
    record = {"program": f"{PROGRAMS[route]}, an exported inference model", "process": "child", "route": route,
              "source": f"{project.spec.model.inference} ({model.suffix} + .pdiparams, copied)"}
    shapes = read["output_shapes"]
    return {"inputs": [s.model_dump() for s in project.inputs], "num_outputs": len(shapes),
            "output_shapes": shapes, "export": record}


class ExportConfig(PassConfig):
    route: Literal["pir", "legacy"] = "legacy"    # the program format asked for (api.plan_passes)


@register
class ExportPass(Pass):
    name = "export"
    version = 3
    consumes = frozenset({PROJECT})
    produces = PADDLE_FLOAT
    Config = ExportConfig

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        project = ctx.project
        if project.inference is not None:
            return _from_inference(project, out_dir)
        factory = project.spec.model.factory
        weights = str(project.weights) if project.weights is not None else None
        inputs = [s.model_dump() for s in project.inputs]
        result = run_native(self.name, f"factory '{factory}'", export_model,
                            (str(project.root), factory, weights, inputs, str(out_dir), self.config.route,
                             project.fold),
                            out_dir.parent / f"{out_dir.name}.export.log", timeout=_EXPORT_TIMEOUT_S,
                            hint="the model's own code ended the export process; run the factory by hand "
                                 "to see why")
        if "error" in result:
            cls, message, hint = result["error"]
            if cls == "config":
                raise ConfigError(message, hint=hint)
            raise PassError(self.name, message, hint=hint)
        note = result["ok"]["export"].get("route_note")
        if note:
            ctx.log(note)
        return result["ok"]


def lite_refusal(project, target=None) -> ConfigError:
    """A PIR program for Paddle Lite: one line naming the command that works for this model."""
    import os

    model = pir_program(project)
    where = "" if project.root.resolve() == Path.cwd().resolve() else f"{os.path.relpath(project.root)} "
    name = target.name if target is not None else "TARGET"
    ways = []
    if target is None or "onnx" in target.backends():
        ways.append(f"build it through ONNX: edgeforge build {where}--target {name} --backend onnx")
    ways.append("for Paddle Lite, write the legacy program from the model's code: edgeforge export "
                "--factory MODULE:CLASS --weights W.pdparams --legacy --out legacy, then [model] inference = "
                "\"legacy/inference\"")
    return ConfigError(f"[model] inference = {project.spec.model.inference}: {model.name} is a PIR program; "
                       "Paddle Lite reads only legacy programs (.pdmodel), and Paddle 3.3 cannot translate "
                       "one (docs/export.md)", hint="; or ".join(ways))


def routes_for(project, backend: str, target=None) -> tuple[str, ...]:
    """The program routes to try, in order: ONNX reads PIR through paddle2onnx >= 2 (the legacy
    program is the fallback), Paddle Lite only the legacy program; an exported inference model
    has the route of its own file: a PIR one for Paddle Lite (it reads only the legacy
    ProgramDesc) is refused here, before anything runs, naming what works (:func:`lite_refusal`)."""
    if project.inference is not None:
        if pir_program(project) is None:
            return ("legacy",)
        if backend == "lite":
            raise lite_refusal(project, target)
        return ("pir",)
    return ("pir", "legacy") if backend == "onnx" else ("legacy",)
