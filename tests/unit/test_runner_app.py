"""The runner zipapp (issue 48): deterministic bytes keyed by their sha256, built outside the source
tree, the whole package but its inline remote scripts, runnable alone; results validate its digest."""
from __future__ import annotations

import ast
import hashlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from edgeforge.device.link.runner_app import APP_PREFIX, app_bytes, package_files, runner_app
from edgeforge.device.link.settings import LEGACY_RUNNER, runner_file
from edgeforge.errors import BuildInvalid
from edgeforge.runner import PACKAGE_DIR


def test_two_builds_give_the_same_bytes_and_name(tmp_path):
    a = runner_app(out_dir=tmp_path / "a")
    b = runner_app(out_dir=tmp_path / "b")
    assert a.path.read_bytes() == b.path.read_bytes() == app_bytes()
    assert a.sha256 == b.sha256 == hashlib.sha256(a.path.read_bytes()).hexdigest()
    assert a.path.name == b.path.name == f"{APP_PREFIX}{a.sha256[:12]}.pyz"
    again = runner_app(out_dir=tmp_path / "a")                  # already there: kept as it is
    assert again == a and sorted(p.name for p in (tmp_path / "a").iterdir()) == [a.name]


def test_entries_are_sorted_with_fixed_times_and_modes():
    with zipfile.ZipFile(runner_app().path) as zf:
        infos = zf.infolist()
    names = [i.filename for i in infos]
    assert names[0] == "__main__.py" and names[1:] == sorted(names[1:])
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.external_attr >> 16 for i in infos} == {0o100644}
    assert not [n for n in names if "/remote/" in n or "__pycache__" in n]
    assert {n.split("/", 1)[1] for n in names[1:]} == {f.relative_to(PACKAGE_DIR).as_posix()
                                                      for _, f in package_files()}


def test_the_default_build_goes_to_the_cache_not_the_source_tree(tmp_path, monkeypatch):
    tree = PACKAGE_DIR.parent.parent
    before = set(tree.glob("**/*.pyz"))            # a CI cache may live inside the checkout
    monkeypatch.setenv("EDGEFORGE_CACHE", str(tmp_path / "cache"))
    app = runner_app()
    assert app.path.parent == tmp_path / "cache" / "runner"
    assert set(tree.glob("**/*.pyz")) == before
    assert not list(PACKAGE_DIR.parent.glob("**/*.pyz"))


def test_a_cache_that_cannot_be_written_builds_into_a_temporary_directory(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")             # the cache path is a file: no directory can be made under it (root too)
    monkeypatch.setenv("EDGEFORGE_CACHE", str(blocked))
    app = runner_app()
    assert app.path.is_file() and blocked not in app.path.parents and app.path.read_bytes() == app_bytes()


def test_an_edit_changes_the_digest(tmp_path):
    root = tmp_path / "runner"
    shutil.copytree(PACKAGE_DIR, root, ignore=shutil.ignore_patterns("__pycache__"))
    same = runner_app(root, out_dir=tmp_path / "same")
    assert same.sha256 == runner_app(out_dir=tmp_path / "orig").sha256
    (root / "load.py").write_text((root / "load.py").read_text() + "\n# an edit\n")
    assert runner_app(root, out_dir=tmp_path / "edited").sha256 != same.sha256


def test_it_runs_alone_and_says_a_bad_spec_in_one_line(tmp_path):
    app = runner_app(out_dir=tmp_path / "app")
    res = subprocess.run([sys.executable, "-I", str(app.path), "bench", str(tmp_path), "--spec", "{nope"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert '"kind": "usage"' in res.stdout and "--spec is not JSON" in res.stdout


def test_every_module_stays_small_and_python_37():
    for _, f in package_files():
        src = f.read_text()
        assert len(src.splitlines()) < 500, f
        ast.parse(src, feature_version=(3, 7))          # the oldest Python a device may have


def test_the_runner_is_named_among_the_files():
    app = runner_app()
    assert runner_file({"model.onnx": "x", app.name: "y"}) == app.name
    assert runner_file({"model.onnx": "x", LEGACY_RUNNER: "y"}) == LEGACY_RUNNER      # a release of before
    with pytest.raises(BuildInvalid, match="no runner"):
        runner_file({"model.onnx": "x"})


@pytest.mark.parametrize("value,ok", [("a" * 64, True), (None, True), ("A" * 64, False), ("abc", False)])
def test_results_validate_the_runner_digest(value, ok):
    from edgeforge.errors import ResultError
    from edgeforge.results.deploy import DeviceEntry
    from edgeforge.results.schema import BenchResult
    from result_factory import make_result

    doc = {**make_result(), "runner_sha256": value}
    if ok:
        assert BenchResult.check(doc).runner_sha256 == value
        assert DeviceEntry(device="d", target="t", runner_sha256=value).runner_sha256 == value
    else:
        with pytest.raises(ResultError, match="runner_sha256"):
            BenchResult.check(doc)
