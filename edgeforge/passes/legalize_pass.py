"""legalize: rewrite the exported program into the form the frozen converters accept, then run
the pre-flight check. Rewrites and findings live in ``legalize.py``; this is the pass wrapper."""
from __future__ import annotations

from pathlib import Path

from ..errors import PassError
from ..paddle_env import static_mode
from .base import PADDLE_FLOAT, Artifact, Pass, PassConfig, PassContext, register


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
        from . import legalize

        cfg: LegalizeConfig = self.config
        with static_mode():
            applied = legalize.legalize_model(inp.path, out_dir, cfg.backend, cfg.valid_targets)
            if applied:
                ctx.log("rewrites: " + ", ".join(f"{a['rewrite']} ({a['ops']} ops)" for a in applied))
            findings = legalize.preflight(out_dir, cfg.backend, cfg.valid_targets) if hasattr(legalize, "preflight") else []
        if findings:
            first = findings[0]
            others = f" (+{len(findings) - 1} more; run `edgeforge check`)" if len(findings) > 1 else ""
            raise PassError("preflight", f"target cannot take op '{first.op}' x{first.count}: {first.reason}{others}",
                            hint=first.remedy)
        return dict(inp.meta, rewrites=applied)
