"""The build-code digest (part of every cache key) covers the code that makes builds, and only it."""
from __future__ import annotations

import shutil
from pathlib import Path

import import_graph

from edgeforge import cache

PACKAGE = Path(cache.__file__).resolve().parent


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "edgeforge"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _digest(root: Path) -> str:
    cache._build_code_digests.pop(root.resolve(), None)      # computed once per process, normally
    return cache.build_code_digest(root)


def test_editing_report_code_keeps_the_digest_and_editing_a_pass_changes_it(tmp_path):
    root = _copy(tmp_path)
    before = _digest(root)
    assert before == cache.build_code_digest(PACKAGE)        # a copy of the same code: same digest

    plots = root / "report" / "plots.py"
    plots.write_text(plots.read_text() + "\n# a report-only edit\n")
    assert _digest(root) == before

    export = root / "passes" / "export.py"
    export.write_text(export.read_text() + "\n# an edit to a pass\n")
    assert _digest(root) != before


def test_a_listed_module_that_is_gone_is_an_error(tmp_path):
    root = _copy(tmp_path)
    (root / "weights.py").unlink()
    try:
        cache.build_code_files(root)
    except FileNotFoundError as exc:
        assert "weights.py" in str(exc)
    else:
        raise AssertionError("a missing build-code module went unnoticed")


def test_everything_the_passes_import_is_build_code():
    """A module the passes or the pipeline import (directly or not) changes what builds write:
    it must be in cache.BUILD_CODE, or an edit to it would reuse stale cached outputs."""
    g = import_graph.graph()
    roots = [m for m in g if m.startswith("edgeforge.passes")] + ["edgeforge.pipeline"]
    covered = {f.resolve() for f in cache.build_code_files()}
    known = import_graph.modules()
    missing = sorted(m for m in import_graph.reachable(g, roots)
                     if known[m].resolve() not in covered)
    assert missing == [], f"add to cache.BUILD_CODE: {missing}"
