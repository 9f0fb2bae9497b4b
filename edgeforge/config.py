"""Shared helpers for reading TOML into typed, strict models.

Unknown keys are errors, and the error suggests the closest valid key.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, TypeVar

import tomli
from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import ConfigError
from .fsutil import read_config_text

# the input dtypes edgeforge builds (edgeforge.toml, the manifest, the runner's feeds)
DTypes = Literal["float32", "float16", "int64", "int32", "uint8"]

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base for every config model: unknown keys are refused, instances are frozen, and values
    are not coerced (``shape = [3.0]``, ``port = "22"`` are errors; an int is a valid float)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def closest(name: str, choices) -> str | None:
    found = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.5)
    return found[0] if found else None


def did_you_mean(name: str, choices) -> str:
    near = closest(name, choices)
    return f" (did you mean '{near}'?)" if near else ""


def read_toml(path: Path, what: str = "config file") -> dict[str, Any]:
    """A TOML file through the one reader (:func:`edgeforge.fsutil.read_config_text`): every
    problem with the file, its encoding or its syntax is one ConfigError naming it."""
    text = read_config_text(path, what)
    try:
        return tomli.loads(text)
    except tomli.TOMLDecodeError as exc:
        raise ConfigError(f"{what} {path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{what} {path}: not valid TOML: nested too deeply") from None


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """Walk a pydantic model along an error location to the model that owns the last key."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(part)
        if field is None:
            return None
        ann = field.annotation
        args = getattr(ann, "__args__", ()) or ()
        candidates = [ann, *args]
        nxt = None
        for cand in candidates:
            inner = getattr(cand, "__args__", ()) or ()
            for c in [cand, *inner]:
                if isinstance(c, type) and issubclass(c, BaseModel):
                    nxt = c
                    break
            if nxt:
                break
        current = nxt
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


NAME_WORDS = "letters, digits, '_', '.' and '-', starting with a letter or a digit"
# What a pattern allows, in words: a validation error never shows a bare regex.
PATTERN_WORDS = {
    r"^[A-Za-z0-9][A-Za-z0-9_.-]*$": NAME_WORDS,
    r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$":
        "module:callable, e.g. 'model:build' (a dotted module path, a colon, a Python name)",
    r"^[0-9a-f]{64}$": "a sha256: 64 lowercase hex digits",
    r"^edgeforge\.build/1$": "'edgeforge.build/1' (this edgeforge's build manifests)",
}


# the type of an error whose message names the values itself (raised as
# ``pydantic_core.PydanticCustomError(SELF_DESCRIBED, message)``): shown without "(got ...)"
SELF_DESCRIBED = "edgeforge_described"


def describe(err: dict) -> str:
    """A pydantic error's message in words, with the value it got (never a bare regex)."""
    msg = err.get("msg", "invalid value")
    if err.get("type") == "string_pattern_mismatch":
        pattern = (err.get("ctx") or {}).get("pattern", "")
        msg = f"must be {PATTERN_WORDS.get(pattern, 'of the documented form (see README)')}"
    if err.get("type") not in ("missing", "extra_forbidden", SELF_DESCRIBED) and "input" in err:
        shown = repr(err["input"])
        msg += f" (got {shown if len(shown) <= 40 else shown[:37] + '...'})"
    return msg


def _unknown_key(model: type[BaseModel], loc: tuple, source: str) -> str:
    owner = _model_at(model, loc)
    choices = list(owner.model_fields) if owner else []
    where = ".".join(str(p) for p in loc)
    return f"{source}: unknown key '{where}'{did_you_mean(loc[-1], choices)}"


def parse_model(model: type[M], data: dict[str, Any], source: str) -> M:
    """Validate ``data`` into ``model``; turn the first problem into a one-line ConfigError.

    A misspelled required key is two errors to pydantic (missing + unknown): the unknown key,
    with the closest valid name, is named first and the missing one after it."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        err = errors[0]
        loc = tuple(err.get("loc", ()))
        where = ".".join(str(p) for p in loc) or "(top level)"
        if err.get("type") == "extra_forbidden":
            raise ConfigError(_unknown_key(model, loc, source)) from None
        if err.get("type") == "missing":
            extra = [tuple(e["loc"]) for e in errors if e.get("type") == "extra_forbidden"
                     and tuple(e["loc"])[:-1] == loc[:-1]]
            if extra:
                raise ConfigError(f"{_unknown_key(model, extra[0], source)}; "
                                  f"required key '{where}' is missing") from None
            raise ConfigError(f"{source}: missing required key '{where}'") from None
        raise ConfigError(f"{source}: {where}: {describe(err)}") from None
