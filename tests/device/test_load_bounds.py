"""issue 23, "load takes any number, and the device pays": absurd load values are refused before
the device is touched (exit 2, one line naming the flag); more workers than the device holds are
refused once its cores and memory are known, before anything is uploaded or started (--force:
up to the hard ceiling); the runner refuses crafted specs on its own; open-loop memory does not
grow with the rate; SIGTERM stops the runner and its workers, none left behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from edgeforge.device.link.runner_app import runner_app
from edgeforge.device.link.health import HealthStore
from edgeforge.results.load import read_load_result
from edgeforge.runner.limits import LOAD_MIN_CAP, LOAD_WORKERS_PER_CORE
from edgeforge.runner.load import _Arrivals

pytestmark = pytest.mark.device

PREFIX = "@@edgeforge "


def _load(cli, lab, build, *extra):
    return cli("load", build, "--device", "local", "--inventory", lab.inventory(), "--results", lab.results,
               "--timeout", "300", *extra)


def _one_error(err: str) -> str:
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def _untouched(lab) -> None:
    """Nothing reached the device: no workdir, no lease, no result."""
    assert not lab.workdir.exists(), list(lab.workdir.rglob("*"))
    assert lab.result_files() == []


# ---------------------------------------------------------------- the host: before anything is sent

@pytest.mark.parametrize("args,flag", [
    (("--concurrency", "100000", "--duration", "1"), "--concurrency"),
    (("--rate", "1e9"), "--rate"),
    (("--rate", "nan"), "--rate"),
    (("--duration", "nan"), "--duration"),
    (("--slo-p99-ms", "nan"), "--slo-p99-ms"),
    (("--warmup", "inf"), "--warmup"),
    (("--rate", "10000", "--duration", "600"), "arrivals"),
], ids=["concurrency-100000", "rate-1e9", "rate-nan", "duration-nan", "slo-nan", "warmup-inf", "arrivals"])
def test_absurd_load_values_are_refused_before_the_device_is_touched(cli, lab, builds, args, flag):
    start = time.monotonic()
    code, out, err = _load(cli, lab, builds.onnx, *args)
    assert code == 2, err
    assert flag in _one_error(err)
    assert time.monotonic() - start < 10
    _untouched(lab)


def _cap() -> int:
    return max(LOAD_MIN_CAP, LOAD_WORKERS_PER_CORE * (os.cpu_count() or 1))


def test_more_workers_than_the_device_holds_are_refused_before_any_upload(cli, lab, builds):
    """The cap needs the device's cores: read by the file check, then refused before the upload
    (no runner, no artifact on the device, the lease released, no result, the device healthy)."""
    over = _cap() + 1
    code, out, err = _load(cli, lab, builds.onnx, "--concurrency", f"1,{over}", "--duration", "0.2",
                           "--sessions", "shared")
    assert code == 2, err
    line = _one_error(err)
    assert f"--concurrency {over}" in line and f"at most {_cap()}" in line and "--force" in line, line
    assert lab.workdir.exists()                                  # the file check ran there
    assert not list(lab.workdir.rglob("edgeforge_runner*")) and not list(lab.workdir.rglob("*.onnx"))
    assert not (lab.workdir / ".lease").exists() and lab.result_files() == []
    assert not HealthStore(lab.root / "devices-local.toml").get("local").get("consecutive_failures")
    # --force goes past the default cap (threads of one session: cheap), up to the hard ceiling
    code, out, err = _load(cli, lab, builds.onnx, "--concurrency", str(over), "--duration", "0.2",
                           "--sessions", "shared", "--force")
    assert code == 0, err
    [path] = lab.result_files()
    [level] = read_load_result(path)["levels"]
    assert level["concurrency"] == over and level["completed"] > 0


# ---------------------------------------------------------------- the runner on its own

def _spec(build: Path, levels, **over) -> dict:
    m = json.loads((build / "manifest.json").read_text())
    spec = {"artifact": {"path": m["artifact"]["path"], "sha256": m["artifact"]["sha256"]},
            "backend": m["backend"], "inputs": m["inputs"],
            "reference": {"inputs": m["reference"]["inputs"], "outputs": m["reference"]["outputs"]},
            "runtime": dict(m.get("runtime") or {}), "levels": levels, "duration_s": 1.0, "warmup_s": 0.2}
    spec.update(over)
    return spec


def _level(**over) -> dict:
    return {"mode": "closed", "sessions": "shared", "threads": 1, "batch": 1, "concurrency": 2, "rate": None,
            **over}


def _runner(command: str, build: Path, spec: dict, timeout: float = 120):
    """The real runner program, as the device runs it: (exit code, events)."""
    proc = subprocess.run([sys.executable, str(runner_app().path), command, str(build), "--spec", json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout)
    return proc.returncode, [json.loads(ln[len(PREFIX):]) for ln in proc.stdout.splitlines() if ln.startswith(PREFIX)]


NAN = float("nan")


@pytest.mark.parametrize("command,change,word", [
    ("load", {"levels": [_level(concurrency=100000)]}, "concurrency"),
    ("load", {"levels": [_level(concurrency=_cap() + 1)]}, "default cap"),
    ("load", {"levels": [_level(mode="open", rate=1e9)]}, "rate"),
    ("load", {"levels": [_level(mode="open", rate=NAN)]}, "rate"),
    ("load", {"levels": [_level(mode="open", rate=10000.0)], "duration_s": 3000.0}, "arrivals"),
    ("load", {"duration_s": NAN}, "duration_s"),
    ("load", {"warmup_s": -1.0}, "warmup_s"),
    ("load", {"levels": [_level()] * 1001}, "levels"),
    ("load", {"levels": [_level(batch=10 ** 6)]}, "batch"),
    ("load", {"levels": [_level(threads=10 ** 9)]}, "threads"),
    ("load", {"levels": [_level(concurrency=True)]}, "concurrency"),
    ("load", {"runtime": {"threads": 0}}, "runtime.threads"),
    ("load", {"deadline_s": NAN}, "deadline_s"),
    ("bench", {"runs": 10 ** 9}, "runs"),
    ("bench", {"warmups": -1}, "warmups"),
    ("bench", {"runs": 10, "warmups": 0, "runtime": {"threads": 10 ** 11}}, "runtime.threads"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_the_runner_refuses_absurd_specs_by_itself(builds, command, change, word):
    spec = _spec(builds.onnx, [_level()], runs=10, warmups=0, **{"drift": False})
    spec.update(change)
    code, events = _runner(command, builds.onnx, spec)
    assert code == 2, events
    [err] = events                            # nothing started: one error event, no start
    assert err["event"] == "error" and err["kind"] == "usage" and word in err["message"], err


def test_the_open_loop_runner_memory_is_flat_while_the_rate_grows_100x(builds):
    """The real runner program, one shared session, 2 workers: peak RSS at 5000 req/s is that
    at 50 req/s (the arrivals are made one at a time, not listed up front)."""
    rss = {}
    for rate in (50.0, 5000.0):
        code, events = _runner("load", builds.onnx, _spec(builds.onnx, [_level(mode="open", rate=rate, seed=1)]))
        assert code == 0, events
        [lv] = [e for e in events if e["event"] == "level"]
        assert lv["offered"] == pytest.approx(rate, rel=0.25)    # the load was offered, served or not
        rss[rate] = lv["peak_rss_mb"]
    assert rss[5000.0] - rss[50.0] < 20, rss


def test_arrivals_are_made_one_at_a_time():
    """A million arrivals (10,000 req/s for 100 s) through the queue the workers share: memory
    stays that of one generator."""
    tracemalloc.start()
    try:
        a = _Arrivals(10000.0, 0.0, 100.0, seed=3, t_measure=10.0)
        first = a.take()
        n = a.finish()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 0 < first < 0.01 and n == pytest.approx(900000, rel=0.01) and a.take() is None
    assert peak < 256 * 1024, peak


# ---------------------------------------------------------------- SIGTERM

def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _load_processes(marker: str) -> list[int]:
    """pids of runner processes running ``load`` (the runner and its forked workers) whose command
    line mentions ``marker``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = [c.decode(errors="replace") for c in Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")]
            except OSError:
                continue
            if any("edgeforge_runner-" in c and c.endswith(".pyz") for c in cmd) and "load" in cmd and any(marker in c for c in cmd):
                pids.append(int(entry))
    return [p for p in pids if _alive(p)]


def _until(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(what)


def test_sigterm_ends_the_runner_and_every_worker_process(builds):
    """The real runner program: a level of one shared session, then levels of 3 worker processes
    ('own' sessions). SIGTERM (what the host sends to stop it) while the workers run ends it
    within seconds: the level measured before is out, then an ``interrupted`` error event, exit
    130, and none of its workers is left."""
    spec = _spec(builds.onnx, [_level(concurrency=1)] + [_level(sessions="own", concurrency=3)] * 3,
                 duration_s=5.0, warmup_s=0.1)
    proc = subprocess.Popen([sys.executable, str(runner_app().path), "load", str(builds.onnx), "--spec", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        workers = _until(lambda: (c := _children(proc.pid)) and len(c) >= 3 and c, 180,
                         "the 3 worker processes never started")
        time.sleep(0.5)
        workers = sorted(set(workers) | set(_children(proc.pid)))
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert took < runner_term_grace(), f"took {took:.1f}s after SIGTERM"
    events = [json.loads(ln[len(PREFIX):]) for ln in out.splitlines() if ln.startswith(PREFIX)]
    levels = [e for e in events if e["event"] == "level"]
    assert levels and levels[0]["concurrency"] == 1 and levels[0]["completed"] > 0    # measured before: out
    assert events[-1]["event"] == "error" and events[-1]["kind"] == "interrupted", events[-1]
    assert "Traceback" not in err, err
    _until(lambda: not any(_alive(w) for w in workers), 5, f"workers left behind: {workers}")


def runner_term_grace() -> float:
    from edgeforge.device.link.interrupt import TERM_GRACE_S

    return TERM_GRACE_S                    # after it the host sends SIGKILL


def test_sigterm_to_the_runner_on_the_device_leaves_no_worker(lab, builds):
    """Through the loopback sshd: a load with 3 worker processes; the runner on the device gets
    SIGTERM; it and its workers are gone within seconds, and the CLI ends (no hang)."""
    from devhelpers import run_cli_subprocess

    proc = run_cli_subprocess("load", builds.onnx, "--device", "local", "--inventory", lab.inventory(),
                              "--results", lab.results, "--timeout", "300", "--concurrency", "3",
                              "--sessions", "own", "--duration", "120")
    try:
        pids = _until(lambda: (p := _load_processes(str(lab.workdir))) and len(p) >= 4 and p, 180,
                      "the runner and its 3 workers never ran on the device")
        top = [p for p in pids if not any(p in _children(q) for q in pids)]
        assert len(top) == 1, pids
        os.kill(top[0], signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    _until(lambda: not _load_processes(str(lab.workdir)), 10, "runner processes left on the device")
    assert proc.returncode != 0 and "Traceback" not in err, err
    assert not (lab.workdir / ".lease").exists()
