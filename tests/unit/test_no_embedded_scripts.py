"""issue 24: device-side programs are real files (edgeforge/runner/, linted and tested), not
string literals: no string in edgeforge/device/ runs past 25 lines."""
from __future__ import annotations

import ast
from pathlib import Path

DEVICE = Path(__file__).resolve().parents[2] / "edgeforge" / "device"


def test_no_long_string_literal_in_device():
    long = []
    for p in sorted(DEVICE.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.count("\n") > 25:
                long.append(f"{p.relative_to(DEVICE.parent)}:{node.lineno} ({node.value.count(chr(10))} lines)")
    assert not long, "move these into files under edgeforge/runner/remote/: " + ", ".join(long)
