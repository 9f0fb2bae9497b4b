"""The build-code digest (part of every cache key) covers the code that makes builds, and only it."""
from __future__ import annotations

import shutil
from pathlib import Path

import import_graph
import pytest

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


DEVICE_ONLY = ("bench", "load", "smoke", "main", "timing", "profile", "end_to_end", "placement", "reference",
               "onnx_proto", "__main__")


def test_the_runner_modules_in_the_build_code_are_exactly_those_the_passes_import():
    """Of the runner package, BUILD_CODE lists what the passes and the pipeline reach (and the
    package's __init__, which every import of it runs): a device-only module (load, bench,
    smoke...) in the list would invalidate every cached step when edited, one left out would
    reuse stale outputs."""
    g = import_graph.graph()
    roots = [m for m in g if m.startswith("edgeforge.passes")] + ["edgeforge.pipeline"]
    reached = {m.split(".")[-1] for m in import_graph.reachable(g, roots) if m.startswith("edgeforge.runner.")}
    listed = {e.removeprefix("runner/").removesuffix(".py") for e in cache.BUILD_CODE if e.startswith("runner")}
    assert listed == reached | {"__init__"}
    assert not listed & set(DEVICE_ONLY)
    assert {p.stem for p in (PACKAGE / "runner").glob("*.py")} == listed | set(DEVICE_ONLY)   # none unsorted


@pytest.mark.parametrize("module", ["load", "bench", "smoke", "main", "timing", "end_to_end"])
def test_editing_a_device_only_runner_module_keeps_the_digest(tmp_path, module):
    root = _copy(tmp_path)
    before = _digest(root)
    f = root / "runner" / f"{module}.py"
    f.write_text(f.read_text() + "\n# a device-only edit\n")
    assert _digest(root) == before


@pytest.mark.parametrize("module", ["metrics", "predictors", "postprocess", "pipeline", "device_facts"])
def test_editing_a_runner_module_a_pass_imports_changes_the_digest(tmp_path, module):
    root = _copy(tmp_path)
    before = _digest(root)
    f = root / "runner" / f"{module}.py"
    f.write_text(f.read_text() + "\n# an edit to code the host runs in a build\n")
    assert _digest(root) != before
