"""`devices check` sends device_facts.py inline with ``python -c``: it must stay far under the
128 KiB Linux allows one argument (MAX_ARG_STRLEN), and run alone, with nothing beside it."""
from __future__ import annotations

import json
import subprocess
import sys

from edgeforge.device.link.runner_app import runner_app
from edgeforge.runner import FACTS_FILE, PACKAGE_DIR

PROBE_MAX_BYTES = 16 * 1024


def test_the_probe_sent_inline_is_under_16_kb(tmp_path):
    size = len(FACTS_FILE.read_bytes())
    assert size < PROBE_MAX_BYTES, f"device_facts.py is {size} bytes"
    app = runner_app(out_dir=tmp_path)
    assert app.path.stat().st_size > PROBE_MAX_BYTES      # the runner itself is not what is sent


def test_the_probe_runs_alone_as_devices_check_sends_it(tmp_path):
    # cwd with nothing of edgeforge in it, isolated mode: only the inline source can run
    res = subprocess.run([sys.executable, "-I", "-c", FACTS_FILE.read_text(), "--workdir", str(tmp_path / "w")],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["machine"] and out["fingerprint"]["cores"] >= 1
    assert out["workdir"] == {"path": str(tmp_path / "w"), "exists": False, "writable": True}
    assert "onnxruntime" in out["runtimes"]


def test_the_zipapp_runs_alone_and_finds_its_facts_inside(tmp_path):
    # as a device runs it: `python RUNNER.pyz probe`, nothing of edgeforge beside it
    app = runner_app(out_dir=tmp_path / "app")
    res = subprocess.run([sys.executable, "-I", str(app.path), "probe"], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["fingerprint"]["cores"] >= 1 and out["runner_version"] >= 5


def test_the_package_loaded_by_path_as_lite_child_does(tmp_path):
    # lite_child.py runs in the Lite toolchain's interpreter, without edgeforge's dependencies
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import lite_child; p = lite_child._predictors(); "
            "import edgeforge_runner.device_facts as f; "
            "print(p.__name__, f.fingerprint()['cores'], 'edgeforge' in sys.modules)")
    res = subprocess.run([sys.executable, "-I", "-c", code, str(PACKAGE_DIR.parent)], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    name, cores, edgeforge_imported = res.stdout.split()
    assert name == "edgeforge_runner.predictors" and int(cores) >= 1 and edgeforge_imported == "False"
