"""The two registered passes: ``legalize`` (float program: rewrites, then the pre-flight check)
and ``legalize.int8`` (the quantized program and the programs kept beside it)."""
from __future__ import annotations

import shutil
from pathlib import Path

from ...errors import PassError
from ...paddle_env import is_pir, static_mode
from ..base import PADDLE_FLOAT, PADDLE_INT8, Artifact, Pass, PassConfig, PassContext, register
from .preflight import preflight
from .program_io import legalize_model


class LegalizeConfig(PassConfig):
    backend: str
    valid_targets: list[str] = []


@register
class LegalizePass(Pass):
    name = "legalize"
    version = 1
    consumes = frozenset({PADDLE_FLOAT})
    produces = PADDLE_FLOAT
    Config = LegalizeConfig

    def target_facts(self, ctx: PassContext):
        return {"backend": self.config.backend, "valid_targets": self.config.valid_targets}

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        cfg: LegalizeConfig = self.config
        if is_pir(inp.path):
            # the rewrites and the pre-flight read a legacy ProgramDesc; a PIR program goes on as
            # it is (paddle2onnx >= 2 reads it; a failure there falls back to the legacy route)
            for f in inp.path.iterdir():
                shutil.copy2(f, out_dir / f.name)
            return inp.meta.updated(rewrites=[], legalize="skipped: a PIR program (rewrites read legacy programs)")
        with static_mode():
            applied = legalize_model(inp.path, out_dir, cfg.backend, cfg.valid_targets)
            if applied:
                ctx.log("rewrites: " + ", ".join(f"{a['rewrite']} ({a['ops']} ops)" for a in applied))
            findings = preflight(out_dir, cfg.backend, cfg.valid_targets)
        if findings:
            first = findings[0]
            others = f" (+{len(findings) - 1} more; run `edgeforge check`)" if len(findings) > 1 else ""
            raise PassError("preflight", f"target cannot take op '{first.op}' x{first.count}: {first.reason}{others}",
                            hint=first.remedy)
        return inp.meta.updated(rewrites=applied)


@register
class LegalizeInt8Pass(LegalizePass):
    """PTQ saves with clip_extra=True, which strips again the attributes legalize added
    (relu6 threshold, ...). Re-legalize the quantized program, and the float and plain-INT8
    programs the quantize pass keeps beside it, before they reach the converter."""

    name = "legalize.int8"
    version = 1
    consumes = frozenset({PADDLE_INT8})
    produces = PADDLE_INT8

    def run(self, inp: Artifact, out_dir: Path, ctx: PassContext) -> dict:
        cfg: LegalizeConfig = self.config
        applied: list[dict] = []
        with static_mode():
            applied = legalize_model(inp.path, out_dir, cfg.backend, cfg.valid_targets)
            for sub in ("float", "plain_int8"):
                if (inp.path / sub).is_dir():
                    (out_dir / sub).mkdir()
                    legalize_model(inp.path / sub, out_dir / sub, cfg.backend, cfg.valid_targets)
        for extra in inp.path.iterdir():
            if extra.is_file() and not (out_dir / extra.name).exists():
                shutil.copy2(extra, out_dir / extra.name)
        return inp.meta.updated(rewrites_int8=applied)
