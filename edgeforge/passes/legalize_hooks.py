"""Glue between the converters and the legalize pass's pre-flight check (naming crash suspects)."""
from __future__ import annotations

from pathlib import Path


def suspects_for(model_dir: Path, backend: str, valid_targets: list[str]) -> list[str]:
    try:
        from .legalize import preflight
    except ImportError:
        return []
    try:
        return [f.op for f in preflight(model_dir, backend, valid_targets)]
    except Exception:  # noqa: BLE001 - best effort while reporting another error
        return []
