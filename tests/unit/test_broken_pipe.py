"""A reader that goes away (`edgeforge targets | head -1`) is not an internal error."""
from __future__ import annotations

import subprocess
import sys


def test_a_closed_pipe_is_a_quiet_exit_0():
    cmd = [sys.executable, "-m", "edgeforge.cli", "targets"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={"COLUMNS": "80", "PATH": ""})
    proc.stdout.close()                 # the reader is gone before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "internal error" not in err and "Traceback" not in err, err
