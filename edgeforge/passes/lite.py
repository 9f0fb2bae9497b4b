"""convert.lite: Paddle Lite's optimizer (paddle_lite_opt) to a naive-buffer ``.nb``.

The optimizer aborts or segfaults on programs it does not handle, so it runs in a child.
"""
from __future__ import annotations

from pathlib import Path

from ..native import run_native
from .base import LITE_NB, PADDLE_FLOAT, PADDLE_INT8, Artifact, Pass, PassConfig, PassContext, register


def _opt(model_dir: str, out_base: str, valid_targets: str, fp16: bool) -> int:
    from paddlelite import lite

    opt = lite.Opt()
    opt.set_model_file(f"{model_dir}/model.pdmodel")
    opt.set_param_file(f"{model_dir}/model.pdiparams")
    opt.set_valid_places(valid_targets)
    opt.set_model_type("naive_buffer")
    opt.set_optimize_out(out_base)
    if fp16:
        opt.enable_fp16()
    opt.run()
    return 0


class LiteConfig(PassConfig):
    valid_targets: list[str] = ["arm"]
    fp16: bool = False


def lite_convert(pass_name: str, model_dir: Path, out_base: Path, valid_targets: list[str], fp16: bool,
                 suspects=None) -> Path:
    run_native(pass_name, f"paddle_lite_opt --valid_targets={','.join(valid_targets)}", _opt,
               (str(model_dir), str(out_base), ",".join(valid_targets), fp16),
               out_base.with_suffix(".opt.log"), suspects=suspects)
    nb = out_base.with_suffix(".nb")
    if not nb.is_file() or nb.stat().st_size == 0:
        from ..errors import PassError

        raise PassError(pass_name, "paddle_lite_opt reported success but wrote no .nb")
    return nb


@register
class LiteConvertPass(Pass):
    name = "convert.lite"
    version = 1
    consumes = frozenset({PADDLE_FLOAT, PADDLE_INT8})
    produces = LITE_NB
    Config = LiteConfig

    def target_facts(self, ctx: PassContext):
        return {"backend": "lite", "valid_targets": self.config.valid_targets}

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        from .legalize_hooks import suspects_for

        vt = self.config.valid_targets
        ctx.log(f"paddle_lite_opt --valid_targets={','.join(vt)}")
        nb = lite_convert(self.name, inp.path, out_dir / "model", vt, self.config.fp16,
                          suspects=lambda: suspects_for(inp.path, "lite", vt))
        meta = {"file": nb.name, "precision": inp.meta.get("precision", "fp32"), "valid_targets": vt}
        float_dir = inp.path / "float"
        if inp.kind == PADDLE_INT8 and float_dir.is_dir():
            ref = lite_convert(self.name, float_dir, out_dir / "float_model", vt, False,
                               suspects=lambda: suspects_for(float_dir, "lite", vt))
            meta["float_size_bytes"] = ref.stat().st_size
            ref.unlink()
        else:
            meta["float_size_bytes"] = nb.stat().st_size
        plain_dir = inp.path / "plain_int8"
        budget = inp.meta.get("accuracy_budget")
        if budget is not None and plain_dir.is_dir():
            plain = lite_convert(self.name, plain_dir, out_dir / "plain_int8", vt, False)
            budget = dict(budget, cost={"size_bytes_int8": plain.stat().st_size, "size_bytes": nb.stat().st_size,
                                        "size_delta_bytes": nb.stat().st_size - plain.stat().st_size,
                                        "p50_ms_int8": None, "p50_ms": None,
                                        "latency_note": "ARM latency is measured on the board (edgeforge bench)"})
            plain.unlink()
        if budget is not None:
            meta["accuracy_budget"] = budget
        for log in out_dir.glob("*.opt.log"):
            log.unlink()
        meta.update({k: v for k, v in inp.meta.items()
                     if k in ("keep_float", "quantization", "rewrites", "calibration_search")})
        return meta
