"""Reading and writing legacy programs, and :func:`legalize_model` (apply the rewrites)."""
from __future__ import annotations

import shutil
from pathlib import Path

from ...errors import PassError
from ...paddle_env import legacy_static, private_scope
from .rewrites import rewrites_for

PASS_NAME = "legalize"
MODEL_FILE = "model.pdmodel"
PARAMS_FILE = "model.pdiparams"


def model_files(model_dir: Path) -> tuple[Path, Path]:
    model_dir = Path(model_dir)
    model, params = model_dir / MODEL_FILE, model_dir / PARAMS_FILE
    if not model.is_file():
        raise PassError(PASS_NAME, f"no {MODEL_FILE} in {model_dir}",
                        hint="legalize takes a legacy export: paddle.jit.save with FLAGS_enable_pir_api=0")
    return model, params


def parse_program(model_file: Path):
    """The ProgramDesc only (no weights): enough to list ops and to plan rewrites."""
    data = Path(model_file).read_bytes()
    with legacy_static():
        from paddle.base.framework import Program

        return Program.parse_from_string(data)


def _feeds_fetches(program) -> tuple[list[str], list[str]]:
    feeds, fetches = {}, {}
    for op in program.global_block().ops:
        if op.type == "feed":
            feeds[op.attr("col")] = op.desc.output("Out")[0]
        elif op.type == "fetch":
            fetches[op.attr("col")] = op.desc.input("X")[0]
    return [feeds[k] for k in sorted(feeds)], [fetches[k] for k in sorted(fetches)]


def legalize_model(src_dir: Path, dst_dir: Path, backend: str, valid_targets: list[str]) -> list[dict]:
    """Apply ``rewrites_for(backend, valid_targets)`` to the model in ``src_dir``; write the
    result to ``dst_dir`` (model.pdmodel + model.pdiparams, same feed and fetch names).

    Returns ``[{"rewrite": name, "ops": n}, ...]`` for the rewrites that changed something
    (n > 0), in the order they ran; ``[]`` when none did, and then the input files are copied
    byte for byte.
    """
    src_dir, dst_dir = Path(src_dir), Path(dst_dir)
    rewrites = rewrites_for(backend, valid_targets)
    model_file, params_file = model_files(src_dir)
    if src_dir.resolve() == dst_dir.resolve():
        raise PassError(PASS_NAME, "source and destination are the same directory")

    # plan on the ProgramDesc alone: cheap, and lets an untouched model be copied as is
    program = parse_program(model_file)
    if not any(r.applies(program) for r in rewrites):
        dst_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(model_file, dst_dir / MODEL_FILE)
        if params_file.exists():
            shutil.copyfile(params_file, dst_dir / PARAMS_FILE)
        return []

    with legacy_static() as paddle, private_scope(paddle) as (scope, exe):
        try:
            program, feed_names, fetch_vars = paddle.static.load_inference_model(
                str(src_dir / "model"), exe)
        except Exception as err:  # paddle raises bare RuntimeError/ValueError here
            raise PassError(PASS_NAME, f"cannot load {src_dir}: {err}") from err
        want_feeds, want_fetches = list(feed_names), [v.name for v in fetch_vars]
        report = []
        for rewrite in rewrites:
            n = rewrite.apply(program, scope)
            if n:
                report.append({"rewrite": rewrite.name, "ops": n})
        block = program.global_block()
        dst_dir.mkdir(parents=True, exist_ok=True)
        try:
            paddle.static.save_inference_model(
                str(dst_dir / "model"),
                [block.var(n) for n in feed_names],
                [block.var(v.name) for v in fetch_vars],
                exe,
                program=program,
                # clip_extra=True would strip exactly what the rewrites restored
                clip_extra=False,
            )
        except Exception as err:
            raise PassError(PASS_NAME, f"cannot save the legalized model: {err}") from err

    got_feeds, got_fetches = _feeds_fetches(parse_program(dst_dir / MODEL_FILE))
    if (got_feeds, got_fetches) != (want_feeds, want_fetches):
        raise PassError(PASS_NAME, f"feeds/fetches changed: {want_feeds}->{got_feeds}, "
                                   f"{want_fetches}->{got_fetches}")
    return report
