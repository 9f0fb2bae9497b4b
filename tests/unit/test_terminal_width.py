"""issue 19, terminal output people read, at 80 and 200 columns (COLUMNS): the fleet and sweep
tables show result paths whole where they fit, else short ids (and say once where the files
are), never a path folded to a ribbon; `devices` keeps the address with its port; progress
lines without a TTY keep their elapsed time; long fleet lines wrap at clause boundaries."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from edgeforge.cli._width import clause_wrap, path_cells, short_id
from result_factory import make_result

NAME = "20261201T161530Z-dev-a-digits-linux-x86-onnx-int8-ab12cd34.json"


def _table_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln[:1] in "┏┃┡│└"]


def _fleet(results: Path):
    """A real FleetOutcome: two devices that benched, one that could not be reached."""
    from edgeforge.device.measure.fleet import DeviceRun, FleetOutcome, Job
    from edgeforge.device.link.inventory import Device

    manifest = {"name": "digits", "target": "linux-x86", "backend": "onnx", "precision": "int8"}
    runs = []
    for c in "abc":
        dev = Device(name=f"dev-{c}", host="127.0.0.1", port=40120 + ord(c) - 97, target="linux-x86",
                     workdir=f"/tmp/edgeforge-{c}")
        job = Job(Path("build/digits-linux-x86"), manifest)
        if c == "c":
            job.status, job.error = "failed", "cannot reach 127.0.0.1:40123"
            runs.append(DeviceRun(dev, [job], status="failed",
                                  error="cannot reach 127.0.0.1:40123: connection refused (after 2 tries)",
                                  hint="check that the device is up; now marked unhealthy after 3 "
                                       "consecutive failed benches"))
        else:
            job.status, job.path = "ok", results / NAME.replace("dev-a", f"dev-{c}")
            job.result = make_result(device=f"dev-{c}", precision="int8", backend="onnx", target="linux-x86")
            runs.append(DeviceRun(dev, [job], status="ok"))
    return FleetOutcome(id="f-1a2b", runs=runs)


@pytest.mark.parametrize("columns", [80, 200])
def test_fleet_table_fits(columns, tmp_path, monkeypatch, capsys):
    from edgeforge.cli.bench import print_fleet

    monkeypatch.setenv("COLUMNS", str(columns))
    results = tmp_path / "results"
    print_fleet(_fleet(results))
    out = capsys.readouterr().out
    table = _table_lines(out)
    assert table and all(len(ln) <= columns for ln in table), out
    rows = [ln for ln in table if "dev-a" in ln]
    assert len(rows) == 1, out                                  # one line per row, no ribbon
    if columns == 200:      # the whole file name (the full path would not fit beside the figures)
        assert NAME in rows[0] and f"results in {results}/ (the files)" in out
    else:
        assert short_id(results / NAME) in rows[0] and f"results in {results}/ (ids:" in out
    assert "failed: dev-c (failed): cannot reach 127.0.0.1:40123" in out
    assert "connection refused (after 2 tries)" in out
    assert all(len(ln) <= columns for ln in out.splitlines() if not ln.startswith("results in"))


@pytest.mark.parametrize("columns", [80, 200])
def test_sweep_table_fits(columns, tmp_path, monkeypatch, capsys):
    from edgeforge.cli.bench import print_sweep

    monkeypatch.setenv("COLUMNS", str(columns))
    results = tmp_path / "results"
    from edgeforge.device.measure.sweep import SweepOutcome, SweepPoint

    p50 = {("fp32", 1): 12.0, ("fp32", 4): 5.0, ("int8", 1): 4.8, ("int8", 4): 2.5}
    points = []
    for prec in ("fp32", "int8"):
        for t in (1, 4):
            pt = SweepPoint(prec, t, None, status="ok",
                            path=results / NAME.replace("int8", prec).replace("161530", f"16153{t}"))
            pt.result = make_result(precision=prec, threads=t, samples=[p50[prec, t]] * 50)
            points.append(pt)
    outcome = SweepOutcome(id="s-1", device="dev-a", target="linux-x86", backend="onnx", points=points)
    print_sweep(outcome)
    out = capsys.readouterr().out
    table = _table_lines(out)
    assert table and all(len(ln) <= columns for ln in table), out
    int8 = [ln for ln in table if ln.startswith("│ int8")]
    assert len(int8) == 2, out
    # the speed-up column is p50(fp32) / p50(int8) at the same threads: 12/4.8 and 5/2.5
    assert "2.50x" in int8[0] and "2.00x" in int8[1], out
    assert (points[0].path.name in out) == (columns == 200)
    assert (short_id(points[0].path) in out) == (columns == 80)


@pytest.mark.parametrize("columns", [80, 200])
def test_devices_keeps_the_port(columns, tmp_path, monkeypatch, capsys):
    from edgeforge.cli.main import main

    inv = tmp_path / "devices.toml"
    inv.write_text('[devices.pi-lab-3]\nhost = "pi-lab-3.lab.example.com"\nport = 2222\nuser = "pi"\n'
                   'target = "rpi4"\npython = "/home/pi/venvs/edgeforge-runtime/bin/python3"\n'
                   'workdir = "/home/pi/edgeforge/work/area/deep"\ntags = ["lab", "arm", "rack-2"]\n')
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["devices", "--inventory", str(inv)]) == 0
    out = capsys.readouterr().out
    assert all(len(ln) <= columns for ln in _table_lines(out)), out
    assert any("pi@pi-lab-3.lab.example.com:2222" in ln for ln in out.splitlines()), out
    assert ("/home/pi/venvs/edgeforge-runtime/bin/python3" in out) == (columns == 200)


def test_progress_without_a_tty_keeps_the_elapsed_time(monkeypatch, capsys):
    from edgeforge.cli._render import step_progress

    monkeypatch.setenv("COLUMNS", "80")
    with step_progress(False) as on_step:
        on_step("check", "sha256 of the files under /home/pi/edgeforge/a-long-workdir-name/0123456789ab… "
                         "and a description longer than the line")
        time.sleep(1.1)
        on_step("run", "edgeforge_runner.py on pi-lab-3")
    err = capsys.readouterr().err
    first = next(ln for ln in err.splitlines() if "check:" in ln)
    assert first.rstrip().endswith("0:00:01"), err
    assert "0…" not in err


def test_clause_wrap_never_breaks_inside_a_clause():
    text = ("failed: dev-b (failed): cannot reach 127.0.0.1:40123: connection refused (after 2 tries); "
            "now marked unhealthy after 3 consecutive failed benches; `edgeforge devices check dev-b` clears the mark")
    lines = clause_wrap(text, 80)
    assert all(len(ln) <= 80 for ln in lines) and len(lines) > 1
    assert " ".join(ln.strip() for ln in lines) == text
    assert "  now marked unhealthy after 3 consecutive failed benches;" in lines


def test_clause_wrap_breaks_a_clause_longer_than_a_line_after_its_commas():
    text = ("digits/linux-x86 on local: INT8 0.83x of fp32 (slower) on this device, interleaved with "
            "its fp32 sibling (95% interval 0.62x-0.93x), top-1 accuracy drop 0.0 points: ship fp32; "
            "--precision auto picks fp32")
    lines = clause_wrap(text, 80)
    assert all(len(ln) <= 80 for ln in lines), lines
    assert " ".join(ln.strip() for ln in lines) == text
    assert lines[0].endswith("on this device,")


def test_path_cells_choose_by_width(tmp_path):
    p = tmp_path / NAME
    assert path_cells([p], 10, 200) == ([str(p)], None)
    cells, footer = path_cells([p, None], 60, 80)
    assert cells == [short_id(p), None] and footer.startswith(f"results in {tmp_path}/")
    assert short_id(p) == "161530Z…ab12cd34"
    assert path_cells([p], 10, 80)[0] == [p.name] or len(str(p)) <= 80 - 10 - 3


@pytest.mark.parametrize("columns", [80, 200])
def test_gates_fit(columns, monkeypatch, capsys):
    """A table where it fits (200), one line per gate where it does not (80): never a gate
    name or a run folded over three lines."""
    from edgeforge.cli._common import print_gates
    from edgeforge.report.gates import GateResult

    monkeypatch.setenv("COLUMNS", str(columns))
    subject = "mobilenet_v2/rpi4/lite/int8@abcdef123456"
    print_gates([GateResult("max_p50_ms", "pi-lab-3", False, 12.345, 10.0, "", subject=subject, fingerprint="fp-1a2b"),
                 GateResult("max_accuracy_drop", "pi-lab-3", True, 0.3, 1.0, "", subject=subject, fingerprint="fp-1a2b")])
    out = capsys.readouterr().out
    assert all(len(ln) <= columns for ln in out.splitlines()), out
    assert subject in out and "max_accuracy_drop" in out and "12.35 ms" in out
    assert (len(_table_lines(out)) > 0) == (columns == 200)
    if columns == 80:
        assert "FAIL max_p50_ms: 12.35 ms (limit 10 ms): pi-lab-3 fp-1a2b:" in out


@pytest.mark.parametrize("columns", [80, 200])
def test_report_table_fits(columns, tmp_path, monkeypatch, capsys):
    from result_factory import make_result

    from edgeforge.cli.main import main
    from edgeforge.fsutil import write_json_atomic

    for i, (name, prec) in enumerate([("mobilenet_v2", "int8"), ("mobilenet_v2", "fp32"), ("digits", "int8")]):
        write_json_atomic(tmp_path / "res" / f"r{i}.json", make_result(name=name, precision=prec, seed=i))
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["report", str(tmp_path / "res"), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    table = _table_lines(out)
    assert table and all(len(ln) <= columns for ln in table), out
    assert len([ln for ln in table if ln.startswith("│ R1 ")]) == 1, out        # one line per run
    assert ("p99 ms" in out) == (columns == 200)
