"""Can the installed Paddle turn a PIR program (prefix.json) into a legacy ProgramDesc (.pdmodel)?

Exports the digits example as PIR, then tries every route Paddle's Python API offers, each in a
fresh interpreter (the IR mode is fixed at import): save_inference_model / serialize_program of
the loaded PIR program in legacy mode, and jit.load + jit.save under the legacy IR. Prints one
line per route (docs/export.md "PIR to legacy"). Usage: python benchmarks/pir_to_legacy.py [WORKDIR]
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

PROBES = {
    "save_inference_model(program=<PIR program>), legacy mode": (
        "0", "prog, feeds, fetches = load()\n"
             "paddle.static.save_inference_model(OUT + '/m', [prog.global_block().ops[0].result(0)], fetches, exe, "
             "program=prog)"),
    "serialize_program(program=<PIR program>)": (
        "0", "prog, feeds, fetches = load()\npaddle.static.serialize_program([], fetches, program=prog)"),
    "jit.load(prefix) under FLAGS_enable_pir_api=0": ("0", "paddle.disable_static()\npaddle.jit.load(PREFIX)"),
    "jit.load under PIR, jit.save inside DygraphOldIrGuard": (
        "1", "paddle.disable_static()\nlayer = paddle.jit.load(PREFIX)\n"
             "from paddle.pir_utils import DygraphOldIrGuard\n"
             "with DygraphOldIrGuard():\n"
             "    paddle.jit.save(layer, OUT + '/m', input_spec=[paddle.static.InputSpec([None, 1, 32, 32], 'float32', 'x')])"),
}
HEAD = """
import os, sys
PREFIX, OUT = sys.argv[1], sys.argv[2]
import paddle
paddle.enable_static()
exe = paddle.static.Executor(paddle.CPUPlace())
def load():
    from paddle.pir_utils import IrGuard
    with IrGuard():
        return paddle.static.load_inference_model(PREFIX, exe)
"""


def main() -> int:
    from inference_export import export_digits

    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="pir-to-legacy-"))
    prefix = work / "pir" / "inference"
    if not prefix.with_suffix(".json").is_file():
        export_digits(REPO / "examples" / "digits", prefix, pir=True)
    import paddle

    print(f"paddle {paddle.__version__}; {prefix}.json")
    for name, (flag, body) in PROBES.items():
        out = work / f"out-{abs(hash(name))}"
        out.mkdir(parents=True, exist_ok=True)
        res = subprocess.run([sys.executable, "-c", HEAD + body, str(prefix), str(out)], capture_output=True, text=True,
                             env=dict(os.environ, FLAGS_enable_pir_api=flag), timeout=600)
        wrote = sorted(p.name for p in out.iterdir())
        last = [ln for ln in res.stderr.splitlines() if "Error" in ln]
        verdict = f"wrote {wrote}" if res.returncode == 0 and wrote else (last[-1][:160] if last else f"exit {res.returncode}")
        print(f"- {name}: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
