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


# ---------------------------------------------------------------- the runner section's numbers
def _runner_section() -> str:
    start = DOC.index("## The runner: modules on the host")
    return DOC[start:DOC.index("\n## ", start + 3)]


def _runner_rows() -> dict[str, int]:
    """module -> the line count the runner table states for it."""
    rows = {}
    for line in _runner_section().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not line.startswith("| `") or len(cells) < 2:
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        counts = [int(n) for n in re.findall(r"\d+", cells[1])]
        assert len(names) == len(counts), f"runner table row {line!r}: names and line counts differ"
        rows.update(zip(names, counts))
    return rows


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_runner_section_states_the_tree():
    """Every runner module is in the table with its size (within 15 % or 20 lines: the table is
    for a reader, not a diff), and the heading figures (module count, total, the largest) hold."""
    runner = PKG / "runner"
    actual = {p.stem: _lines(p) for p in runner.glob("*.py")}
    stated = _runner_rows()
    assert set(stated) == set(actual), (f"runner table: missing {sorted(set(actual) - set(stated))}, "
                                        f"not in the tree {sorted(set(stated) - set(actual))}")
    off = {m: (stated[m], n) for m, n in actual.items() if abs(stated[m] - n) > max(20, 0.15 * n)}
    assert not off, f"docs/architecture.md's runner table is stale (stated, actual): {off}"
    head = _runner_section()
    count = int(re.search(r"a package of (\d+) modules", head).group(1))
    total = float(re.search(r"modules, ([\d.]+)k lines", head).group(1))
    largest, largest_n = re.search(r"`(\w+)` is the largest, (\d+)\)", head).groups()
    assert count == len(actual)
    assert abs(total * 1000 - sum(actual.values())) <= 100, (total, sum(actual.values()))
    assert max(actual, key=actual.get) == largest and abs(int(largest_n) - actual[largest]) <= 20
