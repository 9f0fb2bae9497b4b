"""Glue between the converters and the pre-flight check: when a converter crashes, name the op."""
from __future__ import annotations

from pathlib import Path

from ...paddle_env import static_mode
from .preflight import preflight


def crash_findings(model_dir: Path, backend: str, valid_targets: list[str]) -> list:
    """Pre-flight findings for the program exactly as the converter saw it (no rewrites)."""
    try:
        with static_mode():
            return list(preflight(model_dir, backend, valid_targets, after_legalize=False))
    except Exception:  # noqa: BLE001 - best effort while reporting another error
        return []


def suspects_for(model_dir: Path, backend: str, valid_targets: list[str]) -> list[str]:
    return [f"{f.op} ({f.remedy})" for f in crash_findings(model_dir, backend, valid_targets)]
