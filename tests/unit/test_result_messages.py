"""What the result verbs say about a file they cannot use (issue 23): a load result given to
gate/profile/compare is named as one, with the verb that gates it; a missing file, a directory
or a file that cannot be written is named, never "No such file or directory" alone or an
internal error; no "not a result result"."""
from __future__ import annotations

import json

import pytest
from helpers import run_cli
from result_factory import make_load_result, make_result

from edgeforge.errors import ResultError
from edgeforge.oserror import os_error_text
from edgeforge.results.load import LoadResult


def _err(res) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.stderr
    assert "internal error" not in res.stderr and "Traceback" not in res.stderr, res.stderr
    return lines[0]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "load.json").write_text(json.dumps(make_load_result()))
    (tmp_path / "bench.json").write_text(json.dumps(make_result()))
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "loads").mkdir()
    (tmp_path / "loads" / "a-load.json").write_text(json.dumps(make_load_result()))
    (tmp_path / "loads" / "b-load.json").write_text(json.dumps(make_load_result()))
    (tmp_path / "afile").write_text("not a directory")
    return tmp_path


@pytest.mark.parametrize("verb", [("gate", "--max-p50-ms", "5"), ("profile",), ("compare", "BENCH")])
def test_a_load_result_is_named_with_what_gates_it(files, verb):
    args = [str(files / "bench.json") if a == "BENCH" else a for a in verb]
    res = run_cli(args[0], str(files / "load.json"), *args[1:])
    assert res.returncode == 2, res.stderr
    line = _err(res)
    assert line.startswith(f"error: {files / 'load.json'}: a load result (edgeforge.load/1, from "
                           "edgeforge load), not a bench result;"), line
    assert "--min-throughput" in line and "edgeforge report DIR" in line, line
    assert "unknown" not in line


def test_a_directory_of_load_results_says_what_it_skipped(files):
    res = run_cli("gate", str(files / "loads"), "--max-p50-ms", "5")
    assert res.returncode == 2, res.stderr
    line = _err(res)
    assert f"no complete bench results in {files / 'loads'} (skipped 2 load results)" in line, line
    assert "--min-throughput" in line


def test_not_a_json_object_says_bench_result_once(files):
    for verb in (("gate", "--max-p50-ms", "5"), ("profile",)):
        res = run_cli(verb[0], str(files / "list.json"), *verb[1:])
        assert res.returncode == 2, res.stderr
        line = _err(res)
        assert line == f"error: {files / 'list.json'}: not a bench result (a JSON object is expected)", line


def test_a_bench_result_read_as_a_load_result_is_named():
    with pytest.raises(ResultError, match=r"a bench result \(edgeforge.bench/1, from edgeforge bench\), "
                                          r"not a load result"):
        LoadResult.check(make_result(), "r.json")
    with pytest.raises(ResultError, match="unknown load result schema 'edgeforge.load/2'"):
        LoadResult.check(make_load_result(schema="edgeforge.load/2"), "r.json")


def test_missing_files_and_directories_are_named(files, tmp_path):
    missing = tmp_path / "missing-dir"
    cases = [(("report", str(missing), "--out", str(tmp_path / "rep")), missing),
             (("compare", str(files / "bench.json"), str(tmp_path / "b.json")), tmp_path / "b.json"),
             (("gate", str(tmp_path / "gone.json"), "--max-p50-ms", "5"), tmp_path / "gone.json"),
             (("profile", str(tmp_path / "gone.json")), tmp_path / "gone.json")]
    for args, path in cases:
        res = run_cli(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert _err(res) == f"error: {path}: no such file or directory", res.stderr
    res = run_cli("compare", str(files / "bench.json"), str(files / "loads"))
    assert res.returncode == 2 and _err(res).startswith(f"error: {files / 'loads'}: a directory, not a result file")
    assert not (tmp_path / "rep").exists()


def test_a_junit_path_that_cannot_be_written_is_exit_2_naming_it(files):
    cases = {str(files / "afile" / "x.xml"): f"is below {files / 'afile'}, which is not a directory",
             str(files / "loads"): "is a directory, not a file"}
    for path, why in cases.items():
        res = run_cli("gate", str(files / "bench.json"), "--max-p50-ms", "1000", "--junit", path)
        assert res.returncode == 2, res.stderr
        assert _err(res).startswith(f"error: --junit {path}") and why in res.stderr, res.stderr
    ok = run_cli("gate", str(files / "bench.json"), "--max-p50-ms", "1000", "--junit", str(files / "j.xml"))
    assert ok.returncode == 0 and (files / "j.xml").read_text().startswith("<?xml"), ok.stderr


def test_os_error_text_names_the_file(tmp_path):
    try:
        open(tmp_path / "nope" / "x")
    except OSError as exc:
        assert os_error_text(exc) == f"No such file or directory: '{tmp_path / 'nope' / 'x'}'"
    assert os_error_text(OSError(2, "No such file"), "remote/x") == "No such file: 'remote/x'"
    assert os_error_text(OSError(2, "No such file")) == "No such file"
