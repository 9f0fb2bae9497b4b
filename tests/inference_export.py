"""Export the digits example as the Paddle toolkits export models: paddle.jit.save of the trained
layer, legacy (FLAGS_enable_pir_api=0: prefix.pdmodel + .pdiparams) or PIR (prefix.json), in a
child process so the flag is set before paddle is imported."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import paddle
from model import DigitsNet
layer = DigitsNet()
layer.set_state_dict(paddle.load(sys.argv[1] + "/digits.pdparams"))
layer.eval()
paddle.jit.save(layer, sys.argv[2], input_spec=[paddle.static.InputSpec([None, 1, 32, 32], "float32", "x")])
"""


def export_digits(project: Path, prefix: Path, pir: bool = False) -> Path:
    """Write ``prefix.pdmodel`` + ``prefix.pdiparams`` (or ``prefix.json`` with ``pir``)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FLAGS_enable_pir_api="1" if pir else "0")
    subprocess.run([sys.executable, "-c", _SCRIPT, str(project), str(prefix)], env=env, check=True,
                   capture_output=True, text=True, timeout=300)
    return prefix
