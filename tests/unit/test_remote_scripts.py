"""The device-side scripts are files under edgeforge/runner/remote/, sent as text with
``python -c``: no long string literal is left in edgeforge/device/, each script runs with the
local python against a temporary work directory, both as the file and as the text sent."""
from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgeforge.runner import remote

ROOT = Path(__file__).resolve().parents[2] / "edgeforge"
MAX_LINES = 25


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def long_literals(folder: Path) -> list[str]:
    """String literals (docstrings aside) over MAX_LINES lines, as 'file:line: N lines'."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and node.value.count("\n") > MAX_LINES):
                found.append(f"{path.relative_to(folder)}:{node.lineno}: {node.value.count(chr(10))} lines")
    return found


def test_no_long_string_literal_in_device():
    assert long_literals(ROOT / "device") == [], "move device-side code to edgeforge/runner/remote/"


def test_the_check_sees_a_long_literal(tmp_path):
    (tmp_path / "m.py").write_text('"""doc\n' + "x\n" * 40 + '"""\nS = """\n' + "y\n" * 30 + '"""\n')
    assert long_literals(tmp_path) == ["m.py:43: 31 lines"]


@pytest.mark.parametrize("name", remote.SCRIPTS)
def test_sent_text_compiles_and_imports_nothing_of_edgeforge(name):
    text = remote.script(name)
    tree = ast.parse(text)
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert mods <= set(sys.stdlib_module_names), mods - set(sys.stdlib_module_names)


def test_one_sha256_helper():
    defs = [f"{p.name}:{n.name}" for p in sorted(remote.HERE.glob("*.py"))
            for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.FunctionDef) and "sha" in n.name]
    assert defs == ["common.py:sha256_file"]
    uses = [p.name for p in sorted(remote.HERE.glob("*.py")) if "hashlib" in p.read_text()]
    assert uses == ["common.py"]


def _run(args: list[str], req: dict) -> dict:
    r = subprocess.run([sys.executable, *args, json.dumps(req)], capture_output=True, text=True, timeout=60)
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("@@edgeforge-"))
    return json.loads(line.split(" ", 1)[1])


@pytest.mark.parametrize("how", ["file", "sent"])
def test_prepare_reports_digests_dirs_and_modules(tmp_path, how):
    d = tmp_path / "work" / "sub"
    d.mkdir(parents=True)
    (d / "a.bin").write_bytes(b"x" * 3_000_000)       # over one 1 MiB read
    req = {"workdir": str(tmp_path / "work"), "subdir": "sub", "modules": ["json", "no_such_mod_xyz"],
           "mkdirs": ["m/n"], "files": ["a.bin", "missing.bin"]}
    args = [str(remote.HERE / "prepare.py")] if how == "file" else ["-c", remote.script("prepare")]
    out = _run(args, req)
    assert out["digests"] == {"a.bin": hashlib.sha256(b"x" * 3_000_000).hexdigest(), "missing.bin": None}
    assert out["modules"] == {"json": True, "no_such_mod_xyz": False}
    assert out["writable"] is True and (d / "m" / "n").is_dir() and out["dir"] == str(d)


def test_lease_acquire_busy_release(tmp_path):
    args = ["-c", remote.script("lease")]
    base = {"workdir": str(tmp_path), "token": "t1"}
    got = _run(args, dict(base, op="acquire", owner={"token": "t1", "host": "h"}))
    assert got["status"] == "acquired"
    assert _run(args, dict(base, op="acquire", token="t2", owner={"token": "t2"}))["status"] == "busy"
    assert _run(args, dict(base, op="release", token="t2"))["status"] == "lost"
    assert _run(args, dict(base, op="release"))["status"] == "released"
    assert _run(args, dict(base, op="show"))["status"] == "free"

