"""Load a ``paddle.save`` state dict as tensors only.

``paddle.load`` unpickles arbitrary objects, which runs code. A weights file here may hold
only a (possibly ordered) dict of name -> numpy array; anything else is refused.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from .errors import ConfigError

_ALLOWED = {
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("collections", "OrderedDict"),
}


class _TensorsOnly(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused object {module}.{name}")


def load_state_dict(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise ConfigError(f"weights file not found: {path}", hint="train the model first or fix [model].weights")
    try:
        with open(path, "rb") as fh:
            obj = _TensorsOnly(fh).load()
    except pickle.UnpicklingError as exc:
        raise ConfigError(
            f"weights file {path.name} holds more than a state dict of arrays ({exc})",
            hint="save only model.state_dict() with paddle.save",
        ) from None
    except Exception as exc:  # noqa: BLE001 - truncated or foreign file
        raise ConfigError(f"weights file {path.name} is not a paddle.save state dict: {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, dict) or not obj:
        raise ConfigError(f"weights file {path.name} does not hold a state dict (got {type(obj).__name__})",
                          hint="save only model.state_dict() with paddle.save")
    names = obj.pop("StructuredToParameterName@@", {})   # paddle.save's name map: plain strings
    if not isinstance(names, dict) or not all(isinstance(a, str) and isinstance(b, str) for a, b in names.items()):
        raise ConfigError(f"weights file {path.name}: its name map is not a dict of strings")
    for k, v in obj.items():
        if not isinstance(k, str) or not isinstance(v, np.ndarray) or v.dtype == object:
            raise ConfigError(f"weights file {path.name}: entry {k!r} is not a numeric array",
                              hint="save only model.state_dict() with paddle.save")
    return dict(obj)
