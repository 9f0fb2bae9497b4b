"""issue 44: a signal at the end of the timed runs. SIGTERM or SIGHUP the moment the runner has
finished (every timed run measured) keeps what was measured (the result, named in the one line),
releases `<workdir>/.lease`, leaves no runner and exits 130. Real CLI in a subprocess, real
loopback sshd; the device's Python sends the signal as the runner exits."""
from __future__ import annotations

import json
import signal
import time

import pytest

from devhelpers import run_cli_subprocess, runner_processes
from test_bench_interrupt import LABEL, assert_not_busy

pytestmark = pytest.mark.device

RUNS = 300


def _python_that_signals(lab, pidfile, sig):
    """The device's Python, wrapped: once the bench runner has exited (every run measured, its
    last event printed), it sends ``sig`` to the edgeforge process named in ``pidfile``: the
    signal lands as the host reads the run's end, releases the lease and writes the result."""
    from edgeforge.device.provision.localsshd import device_python

    return lab.script("python-signals", f"""#!/bin/sh
"{device_python()}" "$@"
rc=$?
if [ "$2" = bench ]; then kill -{sig.name[3:]} "$(cat {pidfile})"; fi
exit $rc
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGHUP, marks=pytest.mark.slow)],
                         ids=["SIGTERM", "SIGHUP"])
def test_a_signal_as_the_timed_runs_end_keeps_them(lab, builds, sig):
    pidfile = lab.root / "edgeforge.pid"
    inv = lab.inventory(python=str(_python_that_signals(lab, pidfile, sig)))
    proc = run_cli_subprocess("bench", builds.onnx, "--device", "local", "--inventory", inv,
                              "--results", lab.results, "--runs", str(RUNS), "--warmups", "1")
    pidfile.write_text(str(proc.pid))
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err + out, err
    # in the run's last read: "after 300 of 300 timed runs"; once it returned: "after the run"
    assert any(f"bench on local interrupted ({LABEL[sig]}) after {when}" in errors[0]
               for when in (f"{RUNS} of {RUNS} timed runs", "the run")), errors[0]
    # where the signal landed decides the file: in the run's last read, the runs are kept as an
    # -incomplete result; after it, the whole result is written first (either way, named)
    files = lab.result_files()
    assert len(files) == 1 and files[0].name in errors[0], (files, errors[0])
    result = json.loads(files[0].read_text())
    assert len(result["samples_ms"]) == RUNS and result["lease"]["released_at"] is not None
    assert result["status"] == ("incomplete" if files[0].name.endswith("-incomplete.json") else "ok")
    assert not (lab.workdir / ".lease").exists()
    deadline = time.monotonic() + 10
    while runner_processes(str(lab.workdir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not runner_processes(str(lab.workdir))
    assert_not_busy(lab, builds.onnx, inv)
