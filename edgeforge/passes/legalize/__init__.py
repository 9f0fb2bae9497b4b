"""Legalize: rewrite a legacy Paddle program so the frozen converters take it.

Paddle 3.3 exports (``paddle.jit.save`` with ``FLAGS_enable_pir_api=0``) drop attributes and
outputs that are no longer in Paddle's own op definitions ("clip extra"). Paddle Lite 2.13rc0
still reads some of them unconditionally and then aborts or segfaults the whole process.
Every rewrite here swaps an op for an equivalent form the converter takes. All but one are
bit-exact under Paddle Inference; ``pow2-to-square`` (``exact=False``) agrees to 1 ulp.
``tests/integration/test_legalize.py`` checks each one against Paddle Inference.
``docs/legalize-findings.md`` records the failures each rewrite answers, with the exact messages.

Model directory format: ``model.pdmodel`` + ``model.pdiparams`` (legacy ProgramDesc).
Paddle is imported lazily (``edgeforge.paddle_env``), so importing this package costs nothing.

Layout: :mod:`.rewrites` (the table), :mod:`.op_fixes` (the op surgery), :mod:`.ops` (op
helpers), :mod:`.program_io` (load/save, :func:`legalize_model`), :mod:`.preflight` (what a
target cannot take), :mod:`.registered_passes` (the pipeline passes) and
:mod:`.converter_crash` (naming the op when a converter crashes).
"""
from __future__ import annotations

from .converter_crash import crash_findings, suspects_for
from .preflight import Finding, preflight, supported_ops
from .program_io import MODEL_FILE, PARAMS_FILE, PASS_NAME, parse_program, legalize_model
from .registered_passes import LegalizeConfig, LegalizeInt8Pass, LegalizePass
from .rewrites import BACKENDS, REWRITES, Rewrite, rewrites_for

__all__ = ["BACKENDS", "Finding", "LegalizeConfig", "LegalizeInt8Pass", "LegalizePass", "MODEL_FILE",
           "PARAMS_FILE", "PASS_NAME", "REWRITES", "Rewrite", "parse_program", "crash_findings",
           "legalize_model", "preflight", "rewrites_for", "suspects_for", "supported_ops"]
