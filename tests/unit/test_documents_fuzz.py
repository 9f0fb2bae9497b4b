"""issue 44: every document a verb reads is parsed by its model first. Bench results (with a
``profile`` and an ``end_to_end`` section), load results and build manifests, mutated at random
and with hostile values (Infinity, NaN, negative times, wrong types, huge numbers, nesting
thousands deep, markup), go through the real CLI (``edgeforge.cli.main``, in-process):
``report``, ``profile``, ``compare`` and ``gate`` give back only documented exit codes (0, 1, 2),
never a traceback, at most one ``error:`` line, and write nothing outside their output.

The default suite draws a bounded number of examples; ``make test-slow`` draws more."""
from __future__ import annotations

import copy
import hashlib
import json
import math
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from result_factory import make_load_result, make_result
from test_config_fuzz import _check, _cli, _write, texts_or_bytes
from test_manifest_fuzz import BASE as MANIFEST

# make test: 20 examples (test_a_crafted_result_is_exit_0_1_or_2 took 58 s of 2 loaded cores at 40);
# make test-slow: 250 (the _many twins)
FEW = settings(max_examples=20, deadline=None, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
MANY = settings(FEW, max_examples=250)
DEEP = "<deep>"                    # stands for a value nested thousands of levels deep


def _profile(total: float = 2.0) -> dict:
    by_op = [{"op": "Conv", "ms": total * 0.7, "nodes": 3, "share": 0.7},
             {"op": "QuantizeLinear", "ms": total * 0.3, "nodes": 2, "share": 0.3}]
    return {"total_ms": total, "by_op": by_op, "nodes": 5,
            "by_node": [{"node": "conv1", "op": "Conv", "ms": total * 0.5, "share": 0.5}]}


def fleet() -> dict[str, dict]:
    """An INT8 and an fp32 result of one model on one device (each with a profile), and a load
    result: every verb has something to read in each."""
    int8 = make_result(median_ms=3.1, seed=1, n=40)
    int8["profile"] = _profile(2.0)
    fp32 = make_result(precision="fp32", median_ms=5.4, seed=2, n=40)
    fp32["profile"] = _profile(3.5)
    int8["drift"]["task"] = {"kind": "classify", "metric": "top1", "float": 0.9, "artifact": 0.89, "drop": 0.01}
    return {"int8.json": int8, "fp32.json": fp32, "load.json": make_load_result(), "manifest.json": MANIFEST}


BASE = fleet()
HOSTILE = st.sampled_from([math.inf, -math.inf, math.nan, -1, -1.0, -1e-9, 0, 0.0, 1e308, 10**30, -(10**30),
                           True, None, "", "1", "x" * 10_000, "<script>alert(1)</script>",
                           "<img src=x onerror=alert(1)>", "a|b`c`", [], {}, [[]], {"a": {}}, DEEP,
                           "edgeforge.bench/1", "edgeforge.load/1", "edgeforge.build/1", "edgeforge.report/1"])
SCALARS = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(), st.text(max_size=12))
VALUES = st.one_of(HOSTILE, st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=8))


def dumps(doc) -> str:
    """JSON as a crafted file may hold it: NaN and Infinity kept, ``DEEP`` a list 5000 deep."""
    text = json.dumps(doc, allow_nan=True)
    return text.replace(json.dumps(DEEP), "[" * 5000 + "]" * 5000)


@st.composite
def mutated(draw, doc: dict) -> dict:
    """``doc`` with 1-3 edits at random paths: a key dropped, renamed or given another value."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 3))):
        node = doc
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            child = node[key]
            if isinstance(child, (dict, list)) and child and draw(st.integers(0, 3)) > 0:
                node = child
                continue
            op = draw(st.sampled_from(["value", "value", "value", "drop", "rename"]))
            if op == "value" or isinstance(node, list):
                node[key] = copy.deepcopy(draw(VALUES))      # never a shared constant
            elif op == "drop":
                del node[key]
            else:
                node[str(key) + draw(st.text(min_size=1, max_size=2))] = node.pop(key)
            break
    return doc


def _snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _every_verb(name: str, doc) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        results = root / "results"
        results.mkdir()
        for other, good in BASE.items():
            (results / other).write_text(json.dumps(good))
        (results / name).write_text(dumps(doc) if not isinstance(doc, str) else doc)
        before = _snapshot(results)
        out = root / "out"
        a, b = str(results / "fp32.json"), str(results / "int8.json")
        runs = [("report", str(results), "--out", str(out / "report")),
                ("profile", str(results / name)), ("profile", a, b),
                ("compare", a, b), ("compare", a, b, "--json"),
                ("gate", str(results), "--max-p50-ms", "100", "--min-int8-speedup", "1.0",
                 "--gate-accuracy-drop", "5", "--max-metric-drop", "1", "--junit", str(out / "junit.xml"))]
        for argv in runs:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                code, text = _cli(*argv)
            _check(code, text)
            assert code in (0, 1, 2), (argv, text)
            assert not [w for w in said if "edgeforge" in w.filename or "matplotlib" in w.filename
                        or "numpy" in w.filename or "scipy" in w.filename], (argv, [str(w.message) for w in said])
        assert _snapshot(results) == before
        assert {p.name for p in root.iterdir()} <= {"results", "out"}


DOCS = st.sampled_from(sorted(BASE)).flatmap(lambda n: st.tuples(st.just(n), mutated(BASE[n])))


@FEW
@given(DOCS)
def test_a_crafted_result_is_exit_0_1_or_2(case):
    _every_verb(*case)


@pytest.mark.slow
@MANY
@given(DOCS)
def test_a_crafted_result_is_exit_0_1_or_2_many(case):
    _every_verb(*case)


def test_the_base_fleet_passes_every_verb():
    """The control: unmutated, every verb reads the fleet (exit 0 or 1)."""
    _every_verb("int8.json", BASE["int8.json"])


# ---------------------------------------------------------------- the user config

USER_CONFIG = '[cache]\nremote = "http://127.0.0.1:9/edgeforge"\nmode = "read"\ntimeout = 3\n'


def _user_config(text) -> None:
    """``cache stats`` reads the user config (and resolves the remote from it): exit 0 or 2,
    one error line at most, and nothing written anywhere."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        _write(root / "config.toml", text)
        before = _snapshot(root)
        code, out = _cli("cache", "stats", env={"EDGEFORGE_CONFIG": str(root / "config.toml"),
                                                "EDGEFORGE_CACHE": str(root / "cache")})
        _check(code, out)
        assert code in (0, 2), out
        assert _snapshot(root) == before and not (root / "cache").exists()


def test_the_user_config_control():
    code, out = _cli("cache", "stats", env={"EDGEFORGE_CONFIG": "/nonexistent/config.toml"})
    assert code == 0, out
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "config.toml").write_text(USER_CONFIG)
        code, out = _cli("cache", "stats", env={"EDGEFORGE_CONFIG": str(Path(d) / "config.toml")})
    assert code == 0 and "127.0.0.1:9/edgeforge (read, 3 s a request)" in out, out


@FEW
@given(texts_or_bytes(USER_CONFIG))
def test_a_crafted_user_config_is_exit_0_or_2(text):
    _user_config(text)


@pytest.mark.slow
@MANY
@given(texts_or_bytes(USER_CONFIG))
def test_a_crafted_user_config_is_exit_0_or_2_many(text):
    _user_config(text)
