"""edgeforge's own import graph, read from the source (ast), without importing anything.

Every ``import`` and ``from ... import`` counts, at module level and inside functions (a lazy
import is still a dependency), relative ones resolved against the importing module. An edge
``a -> b`` means module ``a`` imports module ``b`` (``from pkg import name`` counts as ``pkg.name``
when that is a module, else as ``pkg``). Importing a submodule also runs its package's
``__init__``, but that is not an edge here: a package importing its own submodules is the usual
shape, not a cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "edgeforge"


def modules(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """``{"edgeforge.passes.quantize": path, ...}`` for every .py under the package."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module a ``from <level dots><name> import`` in ``module`` refers to."""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The edgeforge modules ``module`` imports (anywhere in the file)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module) if node.level else (node.module or "")
            targets = []
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in known else base)
        else:
            continue
        for target in targets:
            # `import edgeforge.a.b` depends on edgeforge.a.b; keep the longest known prefix
            parts = target.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts and ".".join(parts) != module:
                found.add(".".join(parts))
    return found


def graph(root: Path = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    known = modules(root, package)
    return {name: imports(name, path, known) for name, path in known.items()}


def _is_own_package(a: str, b: str) -> bool:
    """``b`` is a package that contains ``a`` (a submodule importing its package's __init__)."""
    return a.startswith(b + ".")


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected component with more than one module (Tarjan), as a cycle path
    through it, sorted; edges from a module to a package containing it are left out."""
    edges = {a: {b for b in bs if not _is_own_package(a, b)} for a, bs in g.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(_path(c, edges) for c in comps)


def _path(comp: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A closed walk a -> ... -> a inside the component, to name the cycle in a message."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v] & members):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, v, start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def reachable(g: dict[str, set[str]], roots: list[str]) -> set[str]:
    """Every module the ``roots`` import, directly or not (the roots included)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(g.get(m, ()))
    return seen
