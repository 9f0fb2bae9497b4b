"""export: jit export of the trained dygraph model to the legacy static inference program."""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import numpy as np

from ..errors import ConfigError, PassError
from ..paddle_env import import_paddle
from ..weights import load_state_dict
from .base import PADDLE_FLOAT, PROJECT, Artifact, Pass, PassContext, register


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


@register
class ExportPass(Pass):
    name = "export"
    version = 1
    consumes = frozenset({PROJECT})
    produces = PADDLE_FLOAT

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        project = ctx.project
        paddle = import_paddle()
        paddle.disable_static()
        factory = import_factory(project.root, project.spec.model.factory)
        try:
            layer = factory()
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(f"factory '{project.spec.model.factory}' raised {type(exc).__name__}: {_first_line(exc)}") from None
        if not isinstance(layer, paddle.nn.Layer):
            raise ConfigError(f"factory '{project.spec.model.factory}' returned {type(layer).__name__}, not a paddle.nn.Layer")
        if project.weights is not None:
            state = load_state_dict(project.weights)
            own = layer.state_dict()
            missing = sorted(set(own) - set(state))
            unexpected = sorted(set(state) - set(own))
            if missing or unexpected:
                raise ConfigError(
                    f"weights {project.weights.name} do not fit the model: "
                    f"missing {missing[:3]}{'…' if len(missing) > 3 else ''}, unexpected {unexpected[:3]}{'…' if len(unexpected) > 3 else ''}",
                )
            for k, v in state.items():
                if list(own[k].shape) != list(v.shape):
                    raise ConfigError(f"weights {project.weights.name}: '{k}' has shape {list(v.shape)}, the model wants {list(own[k].shape)}")
            layer.set_state_dict({k: paddle.to_tensor(v) for k, v in state.items()})
        layer.eval()

        specs = [paddle.static.InputSpec([None if d == -1 else d for d in s.shape], s.dtype, s.name)
                 for s in project.inputs]
        # Probe the model with the declared inputs first: a mismatch is a configuration error.
        probe = [paddle.to_tensor(np.zeros([1 if d == -1 else d for d in s.shape], dtype=s.dtype)) for s in project.inputs]
        try:
            with paddle.no_grad():
                out = layer(*probe)
        except Exception as exc:  # noqa: BLE001
            shapes = ", ".join(f"{s.name}{s.shape}" for s in project.inputs)
            raise ConfigError(
                f"input spec {shapes} does not match the model: {_first_line(exc)}",
                hint="fix [[model.inputs]] in edgeforge.toml to the shape the model's forward expects",
            ) from None
        outs = out if isinstance(out, (list, tuple)) else [out]
        try:
            paddle.jit.save(layer, str(out_dir / "model"), input_spec=specs)
        except Exception as exc:  # noqa: BLE001
            m = re.search(r"\(InvalidType\) (\w+)\(\): argument .* must be Value, but got Variable", str(exc))
            if m:
                raise PassError(
                    self.name,
                    f"op '{m.group(1)}' cannot be exported to a legacy program: Paddle 3.3's legacy jit.save "
                    f"calls its PIR-only kernel (upstream limitation)",
                    hint=f"express {m.group(1)} with ops that export (see docs/legalize-findings.md), "
                         f"or export the model with an older Paddle",
                ) from None
            raise PassError(self.name, f"paddle.jit.save failed: {_first_line(exc)}",
                            hint="make forward() traceable (its first argument must be named self, no data-dependent Python control flow)") from None
        for stray in out_dir.glob("model.pdiparams.info"):
            stray.unlink()
        if not (out_dir / "model.pdmodel").is_file():
            raise PassError(self.name, "paddle.jit.save wrote no legacy model.pdmodel (PIR export?)",
                            hint="set FLAGS_enable_pir_api=0 before paddle is imported")
        return {"inputs": [s.model_dump() for s in project.inputs], "num_outputs": len(outs),
                "output_shapes": [list(o.shape) for o in outs]}
