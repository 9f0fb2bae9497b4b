"""edgeforge sweep: precision x threads (x power mode) on one device, one table, every point a
normal result tagged with the sweep id."""
from __future__ import annotations

import pytest

from edgeforge.device.measure.sweep import default_threads, parse_list
from edgeforge.errors import ConfigError
from result_factory import read_result_doc

pytestmark = pytest.mark.device


def test_sweep_precision_by_threads(cli, lab, builds, fp32_build, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    junit = tmp_path / "sweep.xml"
    code, out, err = cli("sweep", builds.project, "--target", "linux-x86", "--device", "local",
                         "--inventory", lab.inventory(), "--results", lab.results, "--out", tmp_path / "b",
                         "--threads", "1,2", "--runs", "5", "--warmups", "1", "-q",
                         "--gate-accuracy-drop", "5", "--max-accuracy-drop", "5", "--junit", junit)
    assert code == 0, err
    results = [read_result_doc(f) for f in lab.result_files()]
    assert len(results) == 4
    assert len({r["sweep"]["id"] for r in results}) == 1
    points = {(r["sweep"]["point"]["precision"], r["sweep"]["point"]["threads"]) for r in results}
    assert points == {("fp32", 1), ("fp32", 2), ("int8", 1), ("int8", 2)}
    for r in results:
        p = r["sweep"]["point"]
        assert r["artifact"]["precision"] == p["precision"] and r["settings"]["threads"] == p["threads"]
        assert p["power_mode"] is None and r["settings"]["power_mode"] is None   # linux-x86 lists none
        assert r["sweep"]["points"] == 4 and len(r["samples_ms"]) == 5
    assert f"sweep {results[0]['sweep']['id']}" in out.replace("\n", "")
    for col in ("precision", "threads", "p50", "vs fp32"):
        assert col in out
    assert junit.read_text().count("<testcase") == 4
    # the INT8 verdicts lead the table, one per thread count (issue 18)
    flat = out.replace("\n", " ")
    assert flat.count("verdict: INT8") == 2 and flat.index("verdict: INT8") < flat.index("precision")
    # an INT8 point pairs with the fp32 point of the same thread count (speed-up column, gates, report)
    from edgeforge.report.pairing import float_counterpart

    for r in results:
        if r["artifact"]["precision"] == "int8":
            ref, why = float_counterpart(r, results)
            assert ref is not None and ref["settings"]["threads"] == r["settings"]["threads"], why
    assert (tmp_path / "b" / "digits-linux-x86-onnx-fp32" / "manifest.json").is_file()


def test_sweep_refuses_a_device_of_another_target(cli, lab, builds):
    code, _, err = cli("sweep", builds.project, "--target", "linux-x86", "--device", "local",
                       "--inventory", lab.inventory(target="rpi4"))
    assert code == 2 and "rpi4" in err


def test_sweep_grid_helpers():
    assert default_threads(1) == [1] and default_threads(2) == [1, 2]
    assert default_threads(4) == [1, 2, 4] and default_threads(6) == [1, 2, 4, 6]
    assert parse_list("1, 2,2,4", int, "thread count") == [1, 2, 4]
    with pytest.raises(ConfigError):
        parse_list("1,x", int, "thread count")
    with pytest.raises(ConfigError):
        parse_list("0", int, "thread count")


def test_sweep_out_replaces_only_builds_and_checks_every_one_before_building(cli, lab, builds, tmp_path):
    """`sweep --out DIR` follows build --out's rule for each precision's build directory, all of
    them checked before the first build: a directory of the user's where the INT8 build would go
    is exit 2 naming it, with nothing built (no fp32 directory) and nothing measured."""
    out = tmp_path / "b"
    mine = out / "digits-linux-x86-onnx-int8"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("a week of notes\n")
    args = ["--target", "linux-x86", "--device", "local", "--inventory", lab.inventory(),
            "--results", lab.results, "--threads", "1", "--runs", "3", "--warmups", "0", "-q"]
    code, out_, err = cli("sweep", builds.project, *args, "--out", out)
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(errors) == 1, err + out_
    assert f"--out {mine} exists and is a directory, not an edgeforge build" in errors[0], errors
    assert sorted(p.name for p in out.iterdir()) == [mine.name] and (mine / "notes.txt").read_text() == "a week of notes\n"
    assert lab.result_files() == []
    thesis = tmp_path / "thesis.pdf"           # --out itself a file of the user's
    thesis.write_bytes(b"%PDF-1.7 precious")
    code, _, err = cli("sweep", builds.project, *args, "--out", thesis)
    assert code == 2 and str(thesis) in err and "Traceback" not in err, err
    assert thesis.read_bytes() == b"%PDF-1.7 precious" and lab.result_files() == []
