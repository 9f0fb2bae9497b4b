"""Read bench result files: check the schema id and the keys this package uses, nothing more.

Unknown extra keys are kept (results grow: ``name``, ``id``, ``created_at``, more fingerprint
facts); an unknown schema id or a missing required key is a :class:`ResultError` (exit 2).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable, Iterable

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
    if obj.get("status", "ok") != "ok":
        raise ResultError(f"{source}: {_incomplete(obj)}", hint="only complete runs can be reported, compared or gated")
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
    return validate_result(_read_json(path), str(path))


def load_results(paths: Iterable[str | Path],
                 on_skip: Callable[[Path, str], None] | None = None) -> list[tuple[Path, dict]]:
    """Load result files; a directory contributes every ``*.json`` below it (sorted).

    In a directory, hidden files, our own other documents (report summaries, build manifests) and
    runs that did not complete (``status`` other than ``ok``; ``on_skip`` hears of those) are
    skipped. A file named directly must be a complete result.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise ConfigError("no result files given")
    out: list[tuple[Path, dict]] = []
    seen: set[Path] = set()
    for given in paths:
        if given.is_dir():
            found = [f for f in sorted(given.rglob("*.json"))
                     if not any(part.startswith(".") for part in f.relative_to(given).parts)]
            if not found:
                raise ConfigError(f"no result files (*.json) in {given}")
            for f in found:
                obj = _read_json(f)
                schema = obj.get("schema") if isinstance(obj, dict) else None
                if isinstance(schema, str) and schema.startswith(_OTHER_EDGEFORGE_SCHEMAS):
                    continue
                if schema == BENCH_SCHEMA and obj.get("status", "ok") != "ok":
                    if on_skip:
                        on_skip(f, _incomplete(obj))
                    continue
                if f.resolve() not in seen:
                    seen.add(f.resolve())
                    out.append((f, validate_result(obj, str(f))))
        elif given.resolve() not in seen:  # a file named and also inside a named directory counts once
            seen.add(given.resolve())
            out.append((given, load_result(given)))
    if not out:
        raise ConfigError(f"no complete results in {', '.join(map(str, paths))}")
    return out


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no such result file: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultError(f"{path}: cannot read it as JSON ({exc})") from None


def _incomplete(obj: dict) -> str:
    error = obj.get("error")
    return f"an incomplete run (status {obj.get('status')!r}" + (f": {error})" if error else ")")
