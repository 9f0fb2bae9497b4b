"""edgeforge compare: honest statistics on synthetic but realistic timing samples (no paddle)."""
from __future__ import annotations

import json

import pytest
from helpers import run_cli
from result_factory import PI4, make_result

from edgeforge.errors import ConfigError, ResultError
from edgeforge.report.compare import block_size, compare

SEEDS = range(40)


def test_same_artifact_is_rarely_significant_even_when_samples_are_autocorrelated():
    """Two runs of one artifact, samples lognormal + outliers with lag-1 correlation 0.5 / 0.8."""
    for phi in (0.5, 0.8):
        verdicts = [compare(make_result(seed=2 * s, phi=phi), make_result(seed=2 * s + 1, phi=phi)) for s in SEEDS]
        false_positives = sum(r.significant for r in verdicts)
        naive = sum(r.p_value_iid < 0.05 for r in verdicts)
        assert false_positives <= 4, (phi, false_positives)          # ~5% expected at alpha 0.05
        # the raw-sample test, which treats correlated samples as independent, is fooled often:
        assert naive >= 3 * max(false_positives, 2), (phi, naive, false_positives)


def test_a_15_percent_slowdown_is_detected_with_a_small_p():
    for s in range(10):
        a = make_result(seed=100 + s)
        b = make_result(seed=200 + s, median_ms=11.5)
        r = compare(a, b)
        assert r.verdict == "slower", r.line
        assert r.p_value < 0.001
        assert 12 < r.change_pct < 18
        assert r.ci_low > 1.0
        assert r.line.startswith("B is ") and "% slower than A" in r.line and "p=" in r.line
    r = compare(make_result(seed=1, median_ms=11.5), make_result(seed=2))
    assert r.verdict == "faster" and "% faster than A" in r.line


def test_a_tiny_change_with_a_small_p_is_below_the_practical_threshold():
    a = make_result(seed=1, n=4000, phi=0.0, sigma=0.01)
    b = make_result(seed=2, n=4000, phi=0.0, sigma=0.01, median_ms=10.04)   # +0.4%
    r = compare(a, b)
    assert r.p_value < 0.05 and r.verdict == "not significant"
    assert "practical threshold" in r.reason and r.line.startswith("not significant:")
    assert compare(a, b, min_change=0.001).verdict == "slower"


def test_block_size_grows_with_autocorrelation():
    assert block_size(400, 0.0) == 20
    assert block_size(400, 0.9) == 38          # 2 * (1.9 / 0.1)
    assert block_size(9, 0.0) == 3


def test_too_short_a_run_says_so():
    r = compare(make_result(seed=1, n=8), make_result(seed=2, n=8, median_ms=15))
    assert not r.significant
    assert any("no difference can reach" in w for w in r.warnings)


def test_different_fingerprint_is_refused_unless_forced():
    a = make_result(seed=1)
    b = make_result(seed=2, fingerprint={**PI4, "kernel": "6.6.20-v8+"})
    with pytest.raises(ConfigError) as exc:
        compare(a, b)
    msg = str(exc.value)
    assert exc.value.exit_code == 2 and "\n" not in msg
    assert "different device fingerprints" in msg and "kernel" in msg and "--force" in msg
    r = compare(a, b, force=True)
    assert r.forced_past and any(w.startswith("forced past") for w in r.warnings)
    assert compare(a, make_result(seed=2, fingerprint={**PI4, "governor": "ondemand"}), force=True)


def test_temperature_and_load_do_not_make_runs_incomparable():
    a = make_result(seed=1, temps=(40.0, 41.0))
    b = make_result(seed=2, temps=(62.0, 75.0))
    b["device"]["fingerprint"]["load_avg"] = [7.5, 3.0, 1.0]
    r = compare(a, b)
    assert any("heated up" in w for w in r.warnings)
    assert any("oversubscribed" in w for w in r.warnings)
    assert any("different temperatures" in w for w in r.warnings)


def test_a_fingerprint_key_only_one_run_records_is_a_warning():
    a = make_result(seed=1)
    b = make_result(seed=2)
    del b["device"]["fingerprint"]["cores"]
    assert any("only one run records cores" in w for w in compare(a, b).warnings)


def test_different_runtime_version_is_refused():
    a = make_result(seed=1)
    b = make_result(seed=2, runtime=("paddlelite", "2.14"))
    with pytest.raises(ConfigError, match=r"different runtimes \(version '2.13rc0' vs '2.14'\)"):
        compare(a, b)
    assert compare(a, b, force=True).forced_past


def test_unknown_schema_and_missing_keys_are_rejected():
    bad = make_result(seed=1)
    bad["schema"] = "edgeforge.bench/2"
    with pytest.raises(ResultError, match="unknown result schema 'edgeforge.bench/2'"):
        compare(bad, make_result(seed=2))
    no_runtime = make_result(seed=1)
    del no_runtime["runtime"]["version"]
    with pytest.raises(ResultError, match="runtime.version"):
        compare(no_runtime, make_result(seed=2))


def test_extra_keys_are_tolerated():
    a = make_result(seed=1)
    a.update(id="run-7", future_field={"x": 1})
    a["device"]["fingerprint"]["npu"] = "none"
    assert not compare(a, make_result(seed=2)).significant


def test_to_dict_is_json_and_settings_differences_are_reported():
    r = compare(make_result(seed=1), make_result(seed=2, threads=4))
    d = json.loads(json.dumps(r.to_dict()))
    assert d["verdict"] == r.verdict and d["line"] == r.line
    assert any("threads 1 vs 4" in w for w in r.warnings)


# ---------------------------------------------------------------- the real console script

def _write(tmp_path, name, result) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(result))
    return str(path)


def test_cli_compare_exit_codes_and_one_line_refusal(tmp_path):
    a = _write(tmp_path, "a.json", make_result(seed=1))
    b = _write(tmp_path, "b.json", make_result(seed=2, median_ms=11.5))
    other = _write(tmp_path, "c.json", make_result(seed=3, runtime=("paddlelite", "2.14")))
    unknown = make_result(seed=4)
    unknown["schema"] = "pyperf/1"
    bad = _write(tmp_path, "d.json", unknown)

    ok = run_cli("compare", a, b, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "B is " in ok.stdout and "% slower than A" in ok.stdout

    refused = run_cli("compare", a, other, timeout=120)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: refusing to compare") and "--force" in lines[0]

    forced = run_cli("compare", a, other, "--force", timeout=120)
    assert forced.returncode == 0 and "forced past" in forced.stdout

    schema = run_cli("compare", a, bad, timeout=120)
    assert schema.returncode == 2 and "unknown result schema 'pyperf/1'" in schema.stderr

    js = run_cli("compare", a, b, "--json", timeout=120)
    assert js.returncode == 0 and json.loads(js.stdout)["verdict"] == "slower"
