"""convert.lite: Paddle Lite's optimizer (paddle_lite_opt) to a naive-buffer ``.nb``.

Paddle Lite runs in its own interpreter (the Lite toolchain, edgeforge/toolchain.py): the
optimizer and the x86 runtime run there as a child (edgeforge/lite_child.py), so a segfault or
abort becomes one line. Without the toolchain a Lite build stops before export, exit 2.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from ..build_meta import BuildMeta, Cost
from ..native import run_script
from ..toolchain import LiteToolchain, require_lite
from .base import FLOAT_FILE_LITE, LITE_NB, PADDLE_FLOAT, PADDLE_INT8, Artifact, Pass, PassConfig, PassContext, register

LITE_CHILD = Path(__file__).resolve().parent.parent / "lite_child.py"


def lite_job(pass_name: str, what: str, job: dict, log_path: Path, suspects=None):
    """Run one lite_child.py job in the Lite toolchain's interpreter."""
    tc = require_lite(f"pass {pass_name}")
    return run_script(pass_name, what, [tc.python, str(LITE_CHILD)], job, log_path, suspects=suspects)


def lite_outputs(pass_name: str, model_path: str, names: list[str], feeds: dict, log_path: Path):
    """Run a ``.nb`` under the Paddle Lite x86 runtime on ``feeds``: (runtime info, outputs)."""
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="edgeforge-lite-") as tmp:
        inputs, outputs = Path(tmp) / "inputs.npz", Path(tmp) / "outputs.npz"
        np.savez(inputs, **{k: np.ascontiguousarray(feeds[k]) for k in names})
        res = lite_job(pass_name, "Paddle Lite x86 runtime",
                       {"op": "predict", "model": str(model_path), "names": list(names),
                        "inputs": str(inputs), "outputs": str(outputs)}, log_path)
        with np.load(outputs) as data:
            outs = [np.array(data[f"output_{i}"]) for i in range(res["num_outputs"])]
    return res["runtime"], outs


class LiteConfig(PassConfig):
    valid_targets: list[str] = ["arm"]
    fp16: bool = False


def lite_convert(pass_name: str, model_dir: Path, out_base: Path, valid_targets: list[str], fp16: bool,
                 suspects=None) -> Path:
    lite_job(pass_name, f"paddle_lite_opt --valid_targets={','.join(valid_targets)}",
             {"op": "opt", "model_dir": str(model_dir), "out_base": str(out_base),
              "valid_targets": ",".join(valid_targets), "fp16": fp16},
             out_base.with_suffix(".opt.log"), suspects=suspects)
    nb = out_base.with_suffix(".nb")
    if not nb.is_file() or nb.stat().st_size == 0:
        from ..errors import PassError

        raise PassError(pass_name, "paddle_lite_opt reported success but wrote no .nb")
    return nb


@register
class LiteConvertPass(Pass):
    name = "convert.lite"
    version = 3                 # 3: an INT8 build ships its fp32 sibling
    consumes = frozenset({PADDLE_FLOAT, PADDLE_INT8})
    produces = LITE_NB
    Config = LiteConfig

    def __init__(self, config=None):
        super().__init__(config)
        # Resolved when the build is planned: no toolchain stops the build before export.
        self.toolchain: LiteToolchain = require_lite("backend lite")

    def target_facts(self, ctx: PassContext):
        # the toolchain's versions are part of the cache key
        return {"backend": "lite", "valid_targets": self.config.valid_targets,
                "toolchain": self.toolchain.versions()}

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        from .legalize import suspects_for

        vt = self.config.valid_targets
        ctx.log(f"paddle_lite_opt --valid_targets={','.join(vt)}")
        nb = lite_convert(self.name, inp.path, out_dir / "model", vt, self.config.fp16,
                          suspects=lambda: suspects_for(inp.path, "lite", vt))
        meta = BuildMeta(file=nb.name, precision=inp.meta.precision, valid_targets=vt)
        float_dir = inp.path / "float"
        if inp.kind == PADDLE_INT8 and float_dir.is_dir():
            ref = lite_convert(self.name, float_dir, out_dir / "float_model", vt, False,
                               suspects=lambda: suspects_for(float_dir, "lite", vt))
            meta.float_size_bytes = ref.stat().st_size
            (out_dir / FLOAT_FILE_LITE).parent.mkdir()        # bench's interleaved fp32 sibling
            ref.rename(out_dir / FLOAT_FILE_LITE)
            meta.float_file = FLOAT_FILE_LITE
        else:
            meta.float_size_bytes = nb.stat().st_size
        plain_dir = inp.path / "plain_int8"
        meta.carry(inp.meta, "accuracy_budget", "keep_float", "quantization", "rewrites", "calibration_search",
                   "qat", "prune")
        budget = meta.accuracy_budget
        if budget is not None and plain_dir.is_dir():
            plain = lite_convert(self.name, plain_dir, out_dir / "plain_int8", vt, False)
            budget.cost = Cost(**{"size_bytes_int8": plain.stat().st_size, "size_bytes": nb.stat().st_size,
                                        "size_delta_bytes": nb.stat().st_size - plain.stat().st_size,
                                        "p50_ms_int8": None, "p50_ms": None,
                                  "latency_note": "ARM latency is measured on the board (edgeforge bench)"})
            plain.unlink()
        for log in out_dir.glob("*.opt.log"):
            log.unlink()
        return meta
