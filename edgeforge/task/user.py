"""``[task] metric = "module:function"``: a user metric, run in a child process like every
other piece of user code. ``function(outputs, reference, labels) -> float`` (higher is better,
a share 0-1 like the built-in metrics): ``outputs`` and ``reference`` are lists of arrays (the
model's outputs and the float model's), ``labels`` the evaluation labels or None."""
from __future__ import annotations

import math
from pathlib import Path

from ..errors import ConfigError
from ..native import run_native


def call_metric(root: str, spec: str, runs: list, reference: list, labels) -> list[float]:
    """In the child: import ``spec`` from the project ``root`` and score each of ``runs``."""
    import importlib
    import sys

    sys.path.insert(0, root)
    module, _, name = spec.partition(":")
    fn = getattr(importlib.import_module(module), name)
    out = []
    for outputs in runs:
        v = fn(list(outputs), list(reference), labels)
        try:
            v = float(v)
        except (TypeError, ValueError):
            raise TypeError(f"{spec} returned {type(v).__name__}, not a number") from None
        if not math.isfinite(v):
            raise ValueError(f"{spec} returned {v}")
        out.append(v)
    return out


def user_metric(root: Path, spec: str, log: Path, pass_name: str = "verify"):
    """A :data:`.evaluate.UserMetric` that runs ``spec`` in a child: (float, artifact)."""
    if ":" not in spec:
        raise ConfigError(f"[task] metric = {spec!r}: give it as \"module:function\"")

    def score(outputs, reference, labels):
        f, a = run_native(pass_name, f"the task metric {spec}", call_metric,
                          (str(root), spec, [reference, outputs], reference, labels), log,
                          hint=f"see {log}", timeout=600)
        return f, a
    return score
