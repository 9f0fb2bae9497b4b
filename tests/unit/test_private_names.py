"""No module in edgeforge/ takes a name starting with ``_`` from another edgeforge module: what one
module shares with others is public in the module where it belongs. Read from the source with
``ast`` (``from X import _name`` and ``X._name`` for an imported edgeforge module X); a package's
private modules (``cli/_common.py``) may be imported by name inside edgeforge, their private
names may not."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "edgeforge"
# In flight on the day this test landed (the QAT work edits both files): remove when renamed.
KNOWN: set[tuple[str, str]] = set()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _target(path: Path, node: ast.ImportFrom) -> Path | None:
    """The edgeforge file (module or package) a ``from ... import`` reads, None outside edgeforge."""
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
    elif node.module and node.module.split(".")[0] == "edgeforge":
        base, node_module = ROOT.parent, node.module
        return _file(base / Path(*node_module.split(".")))
    else:
        return None
    return _file(base / Path(*node.module.split("."))) if node.module else base


def _file(stem: Path) -> Path | None:
    for cand in (stem.with_suffix(".py"), stem / "__init__.py", stem):
        if cand.exists():
            return cand
    return None


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        modules = set()        # local names bound to edgeforge modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                src = _target(path, node)
                if src is None:
                    continue
                pkg = src if src.is_dir() else src.parent if src.name == "__init__.py" else None
                for a in node.names:
                    is_module = pkg is not None and ((pkg / f"{a.name}.py").exists() or (pkg / a.name).is_dir())
                    if is_module:
                        modules.add(a.asname or a.name)
                    elif _private(a.name) and src != path:
                        found.append(f"{path.relative_to(root)}:{node.lineno}: imports {a.name}")
            elif isinstance(node, ast.Import):
                modules.update(a.asname or a.name.split(".")[0] for a in node.names
                               if a.name.split(".")[0] == "edgeforge")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr)
                    and isinstance(node.value, ast.Name) and node.value.id in modules):
                found.append(f"{path.relative_to(root)}:{node.lineno}: uses {node.value.id}.{node.attr}")
    return found


def _known(line: str) -> bool:
    path, _, rest = line.partition(":")
    return any(path == p and rest.endswith(f" {n}") for p, n in KNOWN)


def test_no_module_imports_a_private_name_from_another():
    bad = [v for v in violations() if not _known(v)]
    assert bad == [], "make these public where they are defined:\n" + "\n".join(bad)


def test_the_scan_sees_both_spellings(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def _hidden():\n    return 1\n")
    (pkg / "b.py").write_text("from .a import _hidden\nfrom . import a\nx = a._hidden()\n")
    (pkg / "c.py").write_text("from .a import _hidden as h  # noqa\n")
    got = violations(tmp_path)
    assert got == ["pkg/b.py:1: imports _hidden", "pkg/b.py:3: uses a._hidden", "pkg/c.py:1: imports _hidden"]
