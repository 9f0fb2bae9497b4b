"""What a person reads is edgeforge's own (issue 46): a cold build of the digits example prints
no line from a native library. onnxruntime's "Removing initializer" warnings (with ANSI colour
codes), Paddle's and paddle2onnx's lines go to the step's log, kept under the build's logs/."""
from __future__ import annotations

import os
import subprocess
import sys

NATIVE = ("[W:onnxruntime", "Removing initializer", "\x1b[0;93m", "deprecated", "W1205", "I1205",
          "[Paddle2ONNX]", "qdq_quantizer", "Warning", "WARNING")


def test_a_cold_build_prints_only_edgeforge_lines(digits_project, tmp_path):
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "edgeforge.cli", "build", str(digits_project),
                           "--target", "linux-x86", "--no-cache", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == ""                 # piped: no progress lines (the step table says it), no chatter
    out = proc.stdout.splitlines()
    assert out[0].startswith("digits → linux-x86") and any("top-1 accuracy" in ln for ln in out)
    assert not [ln for ln in out if any(n in ln for n in NATIVE)], out
    assert all(len(ln.rstrip()) <= 80 for ln in out)
    logs = "".join(p.read_text(errors="replace") for p in (tmp_path / "out" / "logs").glob("*.log"))
    assert "Removing initializer" in logs           # the chatter is kept, in the step's log
