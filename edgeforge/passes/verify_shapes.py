"""verify.shapes: the artifact across a free dimension's declared range.

An input whose ``[[model.inputs]]`` declares ``min_shape``/``opt_shape``/``max_shape`` (an OCR
line's free width, a token sequence's free length) is run at each of the three sizes: the first
:data:`SAMPLES` evaluation samples, cropped or zero-padded (at the end) along each free dimension
to that size, every ranged input at the same level together (as TensorRT's profile has them).
The artifact runs on the host's runtime (onnxruntime: one session for all sizes; Paddle Lite
x86: a child process, so a fresh predictor, per size) against Paddle Inference on the float
program at the same size. fp32 is judged by the relative max abs error (``float_rel_tolerance``),
INT8 and fp16 by the worst output's cosine (``min_cosine``). A size that fails fails verify with
one line naming it; where the host cannot run the artifact (an ARM ``.nb``) each size is
recorded as skipped, with why.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..paddle_env import paddle_inference

SAMPLES = 4
LEVELS = ("min", "opt", "max")


def fit(arr: np.ndarray, dims: list[int], size: list[int]) -> np.ndarray:
    """``arr`` cropped, or zero-padded at the end, along ``dims`` to ``size[d]``."""
    for d in dims:
        have, want = arr.shape[d], size[d]
        if have > want:
            arr = np.take(arr, np.arange(want), axis=d)
        elif have < want:
            pad = [(0, 0)] * arr.ndim
            pad[d] = (0, want - have)
            arr = np.pad(arr, pad)
    return np.ascontiguousarray(arr)


def _batch(arr: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` samples (repeated when there are fewer)."""
    return arr[np.arange(n) % len(arr)]


def size_feeds(specs: list, feeds: dict[str, np.ndarray], level: str) -> dict[str, np.ndarray]:
    """The evaluation feeds at ``level`` of every ranged input (the others as they are), all
    with one batch: :data:`SAMPLES`, within every declared batch range."""
    n = SAMPLES
    for s in specs:
        if s.ranged and s.shape[0] == -1:
            n = min(max(n, s.min_shape[0]), s.max_shape[0])
        elif s.shape[0] != -1:
            n = s.shape[0]
    return {s.name: fit(_batch(feeds[s.name], n), s.free_dims, getattr(s, f"{level}_shape")) if s.ranged
            else np.ascontiguousarray(_batch(feeds[s.name], n)) for s in specs}


def _judge(outs, reference, precision: str, cfg) -> dict:
    from ..runner.metrics import drift_metrics

    per = drift_metrics(outs, reference).get("outputs", [])
    rel = max((o["rel_max_abs_error"] or 0.0) for o in per) if per else 0.0
    cos = min((o["cosine"] for o in per if o["cosine"] is not None), default=1.0)
    rec = {"rel_max_abs_error": rel, "cosine": cos}
    if precision == "fp32":
        ok = rel <= cfg.float_rel_tolerance
        why = f"float output differs from Paddle Inference by {rel:.2e} (relative) > {cfg.float_rel_tolerance:g}"
    else:
        ok = cos >= cfg.min_cosine
        why = f"cosine {cos:.4f} < {cfg.min_cosine}"
    rec["judged_by"] = "rel_max_abs_error" if precision == "fp32" else "cosine"
    rec["status"] = "passed" if ok else "failed"
    if not ok:
        rec["reason"] = why
    return rec


def _shown(sizes: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sizes.items())


def check_shapes(vp, artifact: Path, float_dir: Path, feeds: dict, precision: str, ctx) -> list[dict] | None:
    """``verify.shapes`` for the inputs with declared ranges (None: no input has one). ``vp`` is
    the verify pass (its config, name and backend facts)."""
    specs = list(ctx.project.inputs)
    if not any(s.ranged for s in specs):
        return None
    cfg, names = vp.config, [s.name for s in specs]
    records, run = [], None
    for level in LEVELS:
        at = size_feeds(specs, feeds, level)
        rec: dict = {"level": level, "sizes": {s.name: list(at[s.name].shape) for s in specs if s.ranged}}
        records.append(rec)
        if not cfg.host_runnable:
            rec.update(status="skipped", reason=f"the host cannot run this {ctx.backend} artifact "
                                                f"({ctx.target.name}): run it on the device")
            continue
        try:
            reference = paddle_inference(float_dir, at)
        except Exception as exc:  # noqa: BLE001 - the float program refuses the size
            raise ConfigError(f"the float program does not run at {_shown(rec['sizes'])} ({level} of the "
                              f"declared range): {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}",
                              hint="narrow min_shape/max_shape in [[model.inputs]] to sizes the model takes") from None
        try:
            if ctx.backend == "onnx":
                if run is None:
                    from ..contracts import host_arithmetic
                    from ..quant.arithmetic import predictor

                    run = predictor(artifact, host_arithmetic(ctx.target, ctx.backend, precision))
                outs = run(at)
            else:
                from .lite import lite_outputs

                _, outs = lite_outputs(vp.name, str(artifact), names, at, ctx.workdir / f"verify-shapes-{level}.log")
        except Exception as exc:  # noqa: BLE001 - the artifact refuses or breaks at this size
            text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            rec.update(status="failed", reason=f"the artifact does not run: {' '.join(str(text).split())[:300]}")
            continue
        rec.update(_judge(outs, reference, precision, cfg))
    for rec in records:
        fig = "" if "cosine" not in rec else (f"rel {rec['rel_max_abs_error']:.2e}, cosine {rec['cosine']:.6f}: ")
        ctx.log(f"shapes {rec['level']} {_shown(rec['sizes'])}: {fig}{rec['status']}")
    return records


def apply(result: dict, records: list[dict] | None) -> None:
    """Put ``records`` into verify's ``result``; the first failed size fails verify (one line)."""
    if records is None:
        return
    result["shapes"] = records
    bad = next((r for r in records if r["status"] == "failed"), None)
    if bad is not None and result.get("status") != "failed":
        result["status"] = "failed"
        result["reason"] = f"at {_shown(bad['sizes'])} ({bad['level']} of the declared range): {bad['reason']}"
