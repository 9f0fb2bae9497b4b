"""The one writer of the edgeforge.toml that ``edgeforge init`` writes.

init assembles the project as a plain document (:class:`TomlDoc`: values, plus a comment per
key for the person who reads the file), then :func:`render` checks it the way the build will
(:class:`edgeforge.project.ProjectSpec`, and every input name as a tensor name the manifest
takes) and writes it with tomlkit, a TOML writer: every string is escaped, a comment with a line
break in it is written on one line, so no name, path or folder can inject a table or make the
file unparsable. The text is read back before it is returned; what it reads back is what was
meant.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

import tomli
import tomlkit

from .config import parse_model
from .errors import ConfigError
from .manifest import RESERVED_NAMES, TENSOR_NAME, TENSOR_NAME_WORDS

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: str) -> str:
    """``text`` with every control character (line breaks included) written as an escape."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def check_input_name(name: str, where: str) -> None:
    """An input name the build takes (a tensor name of the manifest), else a ConfigError."""
    if not isinstance(name, str) or not TENSOR_NAME.match(name) or name in RESERVED_NAMES:
        raise ConfigError(f"{where}: input name {one_line(repr(name))} is not one the build takes: it must be "
                          f"{TENSOR_NAME_WORDS}" + (f", and not {sorted(RESERVED_NAMES)}" if name in RESERVED_NAMES
                                                    else ""))


@dataclass
class TomlDoc:
    """The project as init writes it: ``tables`` maps a table name ("" for the top level) to its
    keys; ``comments`` maps "table.key" to a comment after the value; ``notes`` maps a table name
    to comment lines written at its end; ``inputs``: the [[model.inputs]] tables."""
    tables: dict[str, dict] = field(default_factory=dict)
    inputs: list[dict] = field(default_factory=list)
    comments: dict[str, str] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)

    def data(self) -> dict:
        """The document as the TOML reader will give it back."""
        out = copy.deepcopy(self.tables.get("", {}))
        for name, keys in self.tables.items():
            if name:
                out[name] = copy.deepcopy(keys)
        if self.inputs:
            out.setdefault("model", {})["inputs"] = copy.deepcopy(self.inputs)
        return out


def _spec_view(data: dict) -> dict:
    """``data`` as the build checks it: an input whose free dimensions beyond the batch have no
    range yet (init reports that as missing, for the user to add) is checked with those
    dimensions at 1; everything else as written."""
    view = copy.deepcopy(data)
    for spec in view.get("model", {}).get("inputs", []):
        if not spec.get("min_shape"):
            spec["shape"] = [d if i == 0 or d != -1 else 1 for i, d in enumerate(spec["shape"])]
    return view


def check(doc: TomlDoc) -> None:
    """What the build would refuse in ``doc``, as one ConfigError, before anything is written."""
    from .project import ProjectSpec

    data = doc.data()
    for spec in data.get("model", {}).get("inputs", []):
        check_input_name(spec.get("name"), "init")
    parse_model(ProjectSpec, _spec_view(data), "init: the edgeforge.toml it would write (not written)")


def _table(keys: dict, comments: dict[str, str], prefix: str, notes: list[str]):
    t = tomlkit.table()
    for k, v in keys.items():
        t.add(k, v)
        if f"{prefix}{k}" in comments:
            t[k].comment(one_line(comments[f"{prefix}{k}"]))
    for line in notes:
        t.add(tomlkit.comment(one_line(line)))
    return t


def render(doc: TomlDoc) -> str:
    """The checked document as TOML text (read back and compared before it is returned)."""
    check(doc)
    out = tomlkit.document()
    for k, v in doc.tables.get("", {}).items():
        out.add(k, v)
    for name, keys in doc.tables.items():
        if not name:
            continue
        t = _table(keys, doc.comments, f"{name}.", doc.notes.get(name, []))
        if name == "model" and doc.inputs:
            aot = tomlkit.aot()
            for spec in doc.inputs:
                aot.append(_table(spec, {}, "", doc.notes.get(f"input:{spec['name']}", [])))
            t.add("inputs", aot)
        out.add(tomlkit.nl())
        out.add(name, t)
    text = tomlkit.dumps(out)
    if tomli.loads(text) != doc.data():            # the writer's promise, checked
        raise ConfigError("init: the edgeforge.toml it would write does not read back as written (not written)")
    return text
