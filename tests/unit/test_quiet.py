"""Native output goes to the step's log; edgeforge's own lines reach the terminal (issue 46)."""
from __future__ import annotations

import logging
import os
import sys
import warnings

from edgeforge.quiet import TERMINAL, native_to_log


def test_native_lines_go_to_the_log_and_edgeforge_lines_to_the_terminal(tmp_path, capfd):
    log = tmp_path / "step.log"
    with warnings.catch_warnings(), native_to_log(log):
        warnings.simplefilter("always")
        os.write(2, b"\x1b[0;93m[W:onnxruntime:, graph.cc:4885] Removing initializer 'x'\x1b[m\n")
        os.write(1, b"I1205 paddle glog line\n")
        print("a library's print", file=sys.stderr)
        logging.getLogger("onnxruntime.quantization").warning("Axis 1 is out-of-range")
        warnings.warn("the old way to load inference model is deprecated", UserWarning, stacklevel=1)
        TERMINAL.write("edgeforge: export\n")
        TERMINAL.flush()
    out, err = capfd.readouterr()
    assert err == "edgeforge: export\n" and out == ""
    text = log.read_text()
    for line in ("Removing initializer", "paddle glog line", "a library's print", "Axis 1 is out-of-range",
                 "deprecated"):
        assert line in text
    os.write(2, b"after\n")                                   # the descriptors are back
    assert capfd.readouterr().err == "after\n"
