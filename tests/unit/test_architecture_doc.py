"""issue 24: docs/architecture.md matches the tree. Every module and package its package
table names exists, and every top-level module and package of edgeforge/ is in the table's
first column; every sub-package is named in the table as ``name/``."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "edgeforge"
DOC = (ROOT / "docs" / "architecture.md").read_text()


def _table() -> list[list[str]]:
    start = DOC.index("| package | holds | may import |")
    rows = []
    for line in DOC[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def _named(cell: str) -> set[str]:
    return {re.sub(r"(/|\.py)$", "", n) for n in re.findall(r"`([^`]+)`", cell)}


def _tree() -> set[str]:
    mods = {p.stem for p in PKG.glob("*.py")}
    pkgs = {p.parent.name for p in PKG.glob("*/__init__.py")}
    return mods | pkgs


def test_every_name_in_the_first_column_exists():
    named = set().union(*(_named(r[0]) for r in _table()))
    assert named, "the package table was not found"
    assert not named - _tree(), f"docs/architecture.md names what is not in edgeforge/: {sorted(named - _tree())}"


def test_every_module_and_package_is_in_the_first_column():
    named = set().union(*(_named(r[0]) for r in _table()))
    missing = _tree() - named
    assert not missing, f"add a row to docs/architecture.md's package table for: {sorted(missing)}"


def test_every_sub_package_is_named_in_the_table():
    text = "\n".join(" | ".join(r) for r in _table())
    subs = {p.parent.relative_to(PKG).as_posix() for p in PKG.glob("*/*/__init__.py")}
    missing = [s for s in sorted(subs) if f"`{s.split('/')[-1]}/`" not in text and f"`{s}/`" not in text]
    assert not missing, f"name these packages in docs/architecture.md's package table: {missing}"
