"""``edgeforge export``: the program edgeforge's export pass writes, as files the user keeps.

Paddle 3.3's own legacy export (``FLAGS_enable_pir_api=0`` + ``paddle.jit.save``) fails on models
that call its C++-routed APIs (PP-LCNet's ``multiply``, PP-LiteSeg's ``logical_and``: docs/export.md),
and Paddle 3.3 cannot translate a PIR program into a legacy one. edgeforge's export pass writes
the legacy program with its compatibility layer (:mod:`edgeforge.passes.export_compat`); this
verb runs that same export (the factory in a child process) and writes ``OUT/inference.pdmodel``
+ ``OUT/inference.pdiparams`` (``fmt="pir"``: ``inference.json``), the program Paddle Lite and
``[model] inference`` read. OUT is written whole or not at all, and an OUT that holds files is
refused (nothing the user owns is replaced).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError, PassError

PREFIX = "inference"
_TIMEOUT_S = 1800


@dataclass
class ExportResult:
    prefix: Path                       # OUT/inference
    files: list[Path] = field(default_factory=list)
    inputs: list[dict] = field(default_factory=list)
    record: dict = field(default_factory=dict)     # the export record (route, legacy_api_patch ...)
    next_step: str = ""


def export_program(directory: str | Path, factory: str, out: str | Path, *, weights: str | Path | None = None,
                   inputs: list[str] | None = None, fmt: str = "legacy") -> ExportResult:
    """Export ``factory`` (importable from ``directory``) with ``weights`` to ``out``/inference.
    ``inputs``: ``name:shape:dtype`` texts, else the factory's declared InputSpecs."""
    from .fsutil import atomic_dir
    from .init import check_factory, declared_inputs, parse_input
    from .native import run_native
    from .passes.export import export_model

    root, out = Path(directory).expanduser(), Path(out).expanduser()
    if fmt not in ("legacy", "pir"):
        raise ConfigError(f"export format {fmt!r}: legacy or pir")
    if not root.is_dir():
        raise ConfigError(f"{root}: no such directory (the factory is imported from it)")
    check_factory(factory, root)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out}: {'holds files' if out.is_dir() else 'is a file'}; export never "
                          "replaces what is there", hint="give a new or empty directory")
    w = None
    if weights is not None:
        w = Path(weights).expanduser().resolve()
        if not w.is_file():
            raise ConfigError(f"--weights {weights}: no such file")
    specs = [parse_input(t) for t in inputs or []] or declared_inputs(root, factory, "export")
    with tempfile.TemporaryDirectory(prefix="edgeforge-export-") as tmp, atomic_dir(out) as work:
        result = run_native("export", f"factory '{factory}'", export_model,
                            (str(root.resolve()), factory, None if w is None else str(w), specs, str(work), fmt,
                             None, False),
                            Path(tmp) / "export.log", timeout=_TIMEOUT_S,
                            hint="the model's own code ended the export process; run the factory by hand "
                                 "to see why")
        if "error" in result:
            cls, message, hint = result["error"]
            if fmt == "pir" and message.startswith("paddle.jit.save (PIR) failed"):
                cls, (message, hint) = "config", legacy_instead(message, directory, factory, out, weights, inputs)
            raise (ConfigError(message, hint=hint) if cls == "config" else PassError("export", message, hint=hint))
        files = []
        for f in sorted(work.glob("model.*")):
            files.append(out / f"{PREFIX}{f.suffix}")
            f.rename(work / files[-1].name)
    meta = result["ok"]
    meta["export"]["program"] = meta["export"]["program"].replace("model.", f"{PREFIX}.")
    prefix = out / PREFIX
    return ExportResult(prefix=prefix, files=files, inputs=meta["inputs"], record=meta["export"],
                        next_step=f"edgeforge init DIR --from-inference {prefix}   (or [model] inference = "
                                  f"\"{prefix}\" in a project)")


def legacy_instead(message: str, directory, factory: str, out, weights, inputs) -> tuple[str, str]:
    """A PIR export that fails inside Paddle (PicoDet's ``multiclass_nms3``: PaddleDetection's
    static branch appends a legacy op, which PIR refuses): a usage error (exit 2: ``--pir`` is
    the wrong request for this model), one line naming the ``--legacy`` export of the same model,
    which every target builds from (docs/export.md fact 26)."""
    import shlex

    from .init_toml import one_line

    q = [shlex.quote(str(directory)), "--factory", shlex.quote(factory)]
    q += ["--weights", shlex.quote(str(weights))] if weights is not None else []
    for text in inputs or []:
        q += ["--input", shlex.quote(text)]
    command = one_line(f"edgeforge export {' '.join(q)} --legacy --out {shlex.quote(str(out))}")
    return (f"{message.removesuffix('.')}; the legacy program exports: {command}",
            f"then build from it: [model] inference = \"{one_line(str(Path(out) / PREFIX))}\" "
            "(Paddle Lite and ONNX targets read it)")
