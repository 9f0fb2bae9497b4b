"""Bench statistics, the result schema and its storage, the runner's timing helpers (no paddle, no sshd)."""
from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from edgeforge.errors import ResultError
from edgeforge.results import schema
from edgeforge.results.stats import relative_spread, summarize
from edgeforge.runner.device_facts import fingerprint
from edgeforge.runner.protocol import check_files, sha256_file
from edgeforge.runner.timing import measure, parse_benchmark_bin, warmup_until_stable


def test_summarize_known_values():
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0], peak_rss_mb=12.5)
    assert s["p50_ms"] == 3.0
    assert s["mean_ms"] == pytest.approx(22.0)
    assert s["mad_ms"] == 1.0                      # |x - 3| = 2,1,0,1,97 -> median 1
    assert s["min_ms"] == 1.0 and s["max_ms"] == 100.0 and s["n"] == 5
    assert s["p90_ms"] == pytest.approx(np.percentile([1, 2, 3, 4, 100], 90))
    assert s["p99_ms"] == pytest.approx(96.16)
    assert s["peak_rss_mb"] == 12.5


def test_summarize_empty_and_single():
    assert summarize([])["p50_ms"] is None and summarize([])["n"] == 0
    one = summarize([2.5])
    assert one["p50_ms"] == one["p99_ms"] == 2.5 and one["stdev_ms"] == 0.0 and one["mad_ms"] == 0.0


def test_relative_spread():
    assert relative_spread([10.0, 10.0, 11.0, 9.0, 10.0]) == pytest.approx(0.0)
    assert relative_spread([]) is None


def test_warmup_until_stable_stops_when_settled():
    seq = iter([50.0, 30.0, 20.0, 12.0] + [10.0] * 100)
    warm, stable = warmup_until_stable(lambda: next(seq), window=5, min_runs=10)
    # n=12 is the first count whose two last windows of 5 have medians within 5 % (10 vs 10)
    assert stable is True and len(warm) == 12


def test_warmup_until_stable_gives_up():
    xs = iter(range(1, 10_000))
    warm, stable = warmup_until_stable(lambda: float(next(xs)) ** 2, max_runs=40)
    assert stable is False and len(warm) == 40


def test_measure_fixed_warmups():
    calls = []
    m = measure(lambda: calls.append(1) or 1.0, 3, 7)
    assert m["warmups"] == 3 and len(m["samples_ms"]) == 7 and len(calls) == 10 and m["warmup_stable"] is None


def test_parse_benchmark_bin():
    text = ("======= Runtime Info =======\nbenchmark_bin version: v2.13\nthreads: 4\n"
            "======= Perf Info =======\nTime(unit: ms):\ninit  = 20.5        \nfirst = 3.2\n"
            "min   = 1.100       \nmax   = 1.900\navg   = 1.250       \n")
    assert parse_benchmark_bin(text) == {"version": "v2.13", "init_ms": 20.5, "first_ms": 3.2,
                                                "min_ms": 1.1, "max_ms": 1.9, "avg_ms": 1.25}


def test_fingerprint_fields():
    fp = fingerprint()
    for k in ("cpu_model", "cores", "arch", "kernel", "governor", "temp_c", "load_avg", "mem_total_mb"):
        assert k in fp
    json.dumps(fp)


def test_check_files(tmp_path):
    (tmp_path / "a").write_bytes(b"hello")
    good = sha256_file(tmp_path / "a")
    assert check_files(tmp_path, {"a": good}) == []
    assert check_files(tmp_path, {"a": "0" * 64, "missing": good}) == ["a", "missing"]


def _result(**over):
    r = {"schema": schema.SCHEMA, "status": "ok",
         "artifact": {"sha256": "ab" * 32, "name": "m", "target": "linux-x86", "backend": "onnx", "precision": "int8"},
         "device": {"name": "d", "fingerprint": {k: None for k in schema.FINGERPRINT_KEYS}},
         "runtime": {"name": "onnxruntime", "version": "1"},
         "settings": {"warmups": 0, "runs": 2, "threads": 1},
         "samples_ms": [1.0, 2.0], "summary": summarize([1.0, 2.0]),
         "drift": schema.empty_drift(), "transfer": {"uploaded_bytes": 0, "seconds": 0}}
    r.update(over)
    return r


def test_validate_rejects_unknown_schema_and_missing_fields():
    schema.validate(_result())
    with pytest.raises(ResultError, match="unknown schema"):
        schema.validate(_result(schema="edgeforge.bench/99"))
    r = _result()
    del r["summary"]["p99_ms"]
    with pytest.raises(ResultError, match="summary.p99_ms"):
        schema.validate(r)
    with pytest.raises(ResultError, match="samples"):
        schema.validate(_result(samples_ms=[1.0]))


def test_write_result_never_overwrites(tmp_path, monkeypatch):
    monkeypatch.setattr(schema, "result_filename", lambda r: "same.json")
    paths = [schema.write_result(tmp_path, _result(samples_ms=[float(i), 1.0])) for i in range(3)]
    assert [p.name for p in paths] == ["same.json", "same-2.json", "same-3.json"]
    assert [schema.read_result(p).samples_ms[0] for p in paths] == [0.0, 1.0, 2.0]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["same-2.json", "same-3.json", "same.json"]  # no temp files


def test_write_result_concurrent(tmp_path, monkeypatch):
    monkeypatch.setattr(schema, "result_filename", lambda r: "x.json")
    out = []
    threads = [threading.Thread(target=lambda: out.append(schema.write_result(tmp_path, _result())))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == 8 and len(list(tmp_path.glob("*.json"))) == 8


def test_read_result_errors(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("{not json")
    with pytest.raises(ResultError, match="not valid JSON"):
        schema.read_result(p)
    with pytest.raises(ResultError, match="nope.json: no such file or directory"):
        schema.read_result(tmp_path / "nope.json")


def test_runner_imports_nothing_from_edgeforge():
    """The runner package ships alone (a zipapp): standard library, numpy and the runtimes only
    (and Pillow, inside the declared pre-processing only: [preprocess] builds need it on the
    device; OpenCV's cv2, optional, decodes images in bench --end-to-end where the device has it),
    and its own modules by relative import. device_facts.py, sent alone by `devices check`,
    imports no sibling."""
    import ast
    import sys

    from edgeforge.device.link.runner_app import package_files
    from edgeforge.runner import FACTS_FILE

    allowed = {"numpy", "onnxruntime", "paddlelite", "PIL", "cv2"} | set(sys.stdlib_module_names)
    files = [f for _, f in package_files()]
    assert FACTS_FILE in files and len(files) > 10
    for path in files:
        _imports_only(ast.parse(path.read_text()), allowed, relative=path != FACTS_FILE)


def _imports_only(tree, allowed, relative=False):
    import ast

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                assert relative and node.level == 1, f"relative import {node.module} (level {node.level})"
                continue
            names = [node.module or ""]
        else:
            continue
        for n in names:
            assert n.split(".")[0] in allowed, n


def test_write_result_turns_nan_into_null(tmp_path):
    r = _result(drift={**schema.empty_drift(), "cosine": float("nan")})
    path = schema.write_result(tmp_path, r)
    assert json.loads(path.read_text())["drift"]["cosine"] is None


def test_mad_matches_scipy():
    from scipy.stats import median_abs_deviation

    from edgeforge.results.stats import mad

    x = np.random.default_rng(0).lognormal(0, 0.3, 501)
    assert mad(x) == pytest.approx(median_abs_deviation(x, scale=1.0), rel=1e-12)
