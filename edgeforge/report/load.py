"""Read bench result files for reports, comparisons and gates.

The schema is :class:`edgeforge.results.schema.BenchResult` (one definition for writing and
reading): an unknown schema id or a missing required key is a :class:`ResultError` (exit 2);
unknown extra keys are kept. On top of that, what a report can use: a complete run (status
``ok``) with at least one positive sample.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from ..errors import ConfigError, ResultError
from ..results.schema import SCHEMA, BenchResult, document_kind, read_json

# Our own other documents: skipped when met while scanning a directory, refused when named.
_OTHER_EDGEFORGE_SCHEMAS = ("edgeforge.report/", "edgeforge.build/", "edgeforge.load/",
                           "edgeforge.deploy/")  # see loadcurve
LOAD = "edgeforge.load/1"


def validate_result(obj, source: str = "result") -> dict:
    """Return ``obj`` if it is a complete, reportable ``edgeforge.bench/1`` result, else raise
    ResultError."""
    if isinstance(obj, dict) and obj.get("schema") == SCHEMA and obj.get("status", "ok") != "ok":
        raise ResultError(f"{source}: {_incomplete(obj)}", hint="only complete runs can be reported, compared or gated")
    BenchResult.check(obj, source)
    if not obj["samples_ms"] or not all(s > 0 for s in obj["samples_ms"]):
        raise ResultError(f"{source}: samples_ms must be a non-empty list of positive numbers")
    return obj


def load_result(path: str | Path) -> dict:
    path = Path(path)
    return validate_result(read_json(path), str(path))


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
    others: dict[str, int] = {}          # our other documents skipped, by kind
    for given in paths:
        if given.is_dir():
            found = [f for f in sorted(given.rglob("*.json"))
                     if not any(part.startswith(".") for part in f.relative_to(given).parts)]
            if not found:
                raise ConfigError(f"no result files (*.json) in {given}")
            for f in found:
                obj = read_json(f)
                schema = obj.get("schema") if isinstance(obj, dict) else None
                if isinstance(schema, str) and schema.startswith(_OTHER_EDGEFORGE_SCHEMAS):
                    name = (document_kind(schema) or (schema,))[0]
                    others[name] = others.get(name, 0) + 1
                    continue
                if schema == SCHEMA and obj.get("status", "ok") != "ok":
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
        skipped = ", ".join(_count(n, kind.removeprefix("a ")) for kind, n in others.items())
        raise ConfigError(f"no complete bench results in {', '.join(map(str, paths))}"
                          + (f" (skipped {skipped})" if skipped else ""),
                          hint=document_kind(LOAD)[2] if document_kind(LOAD)[0] in others else None)
    return out


def _count(n: int, noun: str) -> str:
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{n} {noun if n == 1 else plural}"


def _incomplete(obj: dict) -> str:
    error = obj.get("error")
    return f"an incomplete run (status {obj.get('status')!r}" + (f": {error})" if error else ")")


def earlier_results(results_dir: str | Path, skip: Iterable[str | Path] = ()) -> list[dict]:
    """The complete runs already in ``results_dir``, without the files in ``skip`` (the runs
    just made): the fp32 counterparts of new INT8 runs for ``min_int8_speedup``. An unreadable
    or missing directory has none."""
    left_out = {Path(p).resolve() for p in skip if p}
    try:
        return [r for p, r in load_results([Path(results_dir)], on_skip=lambda *_: None)
                if p.resolve() not in left_out]
    except ConfigError:
        return []
