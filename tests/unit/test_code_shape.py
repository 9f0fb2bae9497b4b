"""Issue 11's shape rules, enforced: no module over 500 lines (the on-device runner included, a
package since issue 48), and no function with more than 8 parameters outside the CLI parsers."""
from __future__ import annotations

import ast
from pathlib import Path

import edgeforge

PKG = Path(edgeforge.__file__).parent
MAX_LINES, MAX_PARAMS = 500, 8


def _modules():
    for p in sorted(PKG.rglob("*.py")):
        yield p.relative_to(PKG).as_posix(), p


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    n = len(names) + bool(a.vararg) + bool(a.kwarg)
    return n - 1 if names and names[0] in ("self", "cls") else n


def test_no_module_over_500_lines():
    long = {rel: n for rel, p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_function_with_more_than_8_parameters():
    wide = []
    for rel, p in _modules():
        if rel.startswith("cli/"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _params(node) > MAX_PARAMS:
                wide.append(f"{rel}:{node.lineno} {node.name}({_params(node)})")
    assert not wide, wide
