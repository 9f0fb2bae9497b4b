"""`devices check` sends device_facts.py inline with ``python -c``: it must stay far under the
128 KiB Linux allows one argument (MAX_ARG_STRLEN), and run alone, with nothing beside it."""
from __future__ import annotations

import json
import subprocess
import sys

from edgeforge.runner import FACTS_FILE, RUNNER_FILE

PROBE_MAX_BYTES = 16 * 1024


def test_the_probe_sent_inline_is_under_16_kb():
    size = len(FACTS_FILE.read_bytes())
    assert size < PROBE_MAX_BYTES, f"device_facts.py is {size} bytes"
    assert len(RUNNER_FILE.read_bytes()) > PROBE_MAX_BYTES    # the runner itself is not what is sent


def test_the_probe_runs_alone_as_devices_check_sends_it(tmp_path):
    # cwd with nothing of edgeforge in it, isolated mode: only the inline source can run
    res = subprocess.run([sys.executable, "-I", "-c", FACTS_FILE.read_text(), "--workdir", str(tmp_path / "w")],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["machine"] and out["fingerprint"]["cores"] >= 1
    assert out["workdir"] == {"path": str(tmp_path / "w"), "exists": False, "writable": True}
    assert "onnxruntime" in out["runtimes"]


def test_the_runner_loaded_by_path_finds_its_facts_beside_it(tmp_path):
    # how lite_child.py and benchmarks load it: by file path, outside the edgeforge package
    code = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('r', sys.argv[1]); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); print(m.fingerprint()['cores'])")
    res = subprocess.run([sys.executable, "-I", "-c", code, str(RUNNER_FILE)], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert res.returncode == 0 and int(res.stdout) >= 1, res.stderr
