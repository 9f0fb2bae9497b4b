"""Read bench result files: check the schema id and the keys this package uses, nothing more.

Unknown extra keys are kept (results grow: ``name``, ``id``, ``created_at``, more fingerprint
facts); an unknown schema id or a missing required key is a :class:`ResultError` (exit 2).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable

from ..errors import ConfigError, ResultError

BENCH_SCHEMA = "edgeforge.bench/1"

# Our own other documents: skipped when met while scanning a directory, refused when named.
_OTHER_EDGEFORGE_SCHEMAS = ("edgeforge.report/", "edgeforge.build/")

_REQUIRED_TOP = ("artifact", "device", "runtime", "settings", "samples_ms", "summary")
_REQUIRED_SUB = {
    "artifact": ("sha256", "target", "backend", "precision"),
    "device": ("name", "fingerprint"),
    "runtime": ("name", "version"),
}
_REQUIRED_FINGERPRINT = ("cpu_model", "kernel", "governor")  # present; a value may be null


def validate_result(obj, source: str = "result") -> dict:
    """Return ``obj`` if it is a readable ``edgeforge.bench/1`` result, else raise ResultError."""
    if not isinstance(obj, dict):
        raise ResultError(f"{source}: not a bench result (a JSON object is expected)")
    schema = obj.get("schema")
    if schema != BENCH_SCHEMA:
        raise ResultError(f"{source}: unknown result schema {schema!r}",
                          hint=f"this edgeforge reads {BENCH_SCHEMA}")
    missing = [k for k in _REQUIRED_TOP if k not in obj]
    for section, keys in _REQUIRED_SUB.items():
        if isinstance(obj.get(section), dict):
            missing += [f"{section}.{k}" for k in keys if k not in obj[section]]
        elif section in obj:
            missing.append(f"{section} (an object)")
    fp = (obj.get("device") or {}).get("fingerprint") if isinstance(obj.get("device"), dict) else None
    if isinstance(fp, dict):
        missing += [f"device.fingerprint.{k}" for k in _REQUIRED_FINGERPRINT if k not in fp]
    elif isinstance(obj.get("device"), dict) and "fingerprint" in obj["device"]:
        missing.append("device.fingerprint (an object)")
    if missing:
        raise ResultError(f"{source}: result lacks {', '.join(missing)}")
    samples = obj["samples_ms"]
    if (not isinstance(samples, list) or not samples
            or not all(isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s > 0
                       for s in samples)):
        raise ResultError(f"{source}: samples_ms must be a non-empty list of positive numbers")
    if not isinstance(obj["summary"], dict):
        raise ResultError(f"{source}: summary must be an object")
    return obj


def load_result(path: str | Path) -> dict:
    path = Path(path)
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no such result file: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultError(f"{path}: cannot read it as JSON ({exc})") from None
    return validate_result(obj, str(path))


def load_results(paths: Iterable[str | Path]) -> list[tuple[Path, dict]]:
    """Load result files; a directory contributes every ``*.json`` below it (sorted).

    In a directory, our own non-result documents (report summaries, build manifests) and hidden
    files are skipped; a named file must be a result.
    """
    out: list[tuple[Path, dict]] = []
    for given in paths:
        given = Path(given)
        if given.is_dir():
            found = 0
            for f in sorted(given.rglob("*.json")):
                if any(part.startswith(".") for part in f.relative_to(given).parts):
                    continue
                if _is_other_edgeforge_document(f):
                    continue
                out.append((f, load_result(f)))
                found += 1
            if not found:
                raise ConfigError(f"no result files (*.json) in {given}")
        else:
            out.append((given, load_result(given)))
    if not out:
        raise ConfigError("no result files given")
    return out


def _is_other_edgeforge_document(path: Path) -> bool:
    try:
        schema = json.loads(path.read_text()).get("schema")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False  # load_result reports it properly
    return isinstance(schema, str) and schema.startswith(_OTHER_EDGEFORGE_SCHEMAS)
