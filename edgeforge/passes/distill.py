"""Fine-tuning by distillation: a student model learns its float teacher's outputs.

Shared by the child sides of ``quantize.qat`` (:mod:`.qat_tune`: the student carries fake
quantization) and ``prune`` (:mod:`.prune_tune`: the student lost filters). The loss is each
output's mean squared error relative to the teacher's own energy, on batches drawn from the
calibration data: no labels and no user training loop. Batch norm keeps the statistics the
float model was trained with (only weights move). Bounded by steps and wall time; each step
is one JSON line in ``progress``, which the parent tails (:func:`show_progress`).

Runs in a child process (the user's model code does).
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Plan:
    """How :func:`distill` trains. ``settings``: steps, max_seconds, lr, batch_size (and
    ``extra_lr``, the learning rate of ``extra``: parameters outside the model, such as
    fake-quant ranges). ``progress``: the JSON-lines file the parent tails. ``train_mode``: the
    student in training mode (PaddleSlim's fake quant tracks its scales there), with batch norm
    and dropout still in eval; else all in eval. ``augment``: mixup + shift of image batches
    where the input allows it (:func:`augmentable`)."""

    settings: dict
    progress: Path
    extra: list | None = None
    train_mode: bool = True
    augment: bool = True


def distill(paddle, student, teacher, arrays: dict, names: list[str], plan: Plan) -> dict:
    """Train ``student`` in place on ``arrays`` (by input name, in ``names`` order) as
    ``plan`` says. Returns ``{"losses", "seconds", "stopped_by", "augment"}``."""
    settings, progress, extra = plan.settings, plan.progress, plan.extra
    if plan.train_mode:
        student.train()
        for sub in student.sublayers():
            if isinstance(sub, (paddle.nn.layer.norm._BatchNormBase, paddle.nn.Dropout)):
                sub.eval()
    else:
        student.eval()
    groups = [{"params": student.parameters()}]
    if extra:
        groups.append({"params": extra, "learning_rate": float(settings["extra_lr"]) / float(settings["lr"])})
    opt = paddle.optimizer.Adam(learning_rate=float(settings["lr"]), parameters=groups)
    batch = int(settings["batch_size"])
    n = len(arrays[names[0]])
    rng = np.random.default_rng(0)
    augment = plan.augment and augmentable(arrays, names)
    losses: list[float] = []
    t0 = time.perf_counter()
    stopped_by = "steps"
    with open(progress, "w") as prog:
        for step in range(int(settings["steps"])):
            if time.perf_counter() - t0 > float(settings["max_seconds"]):
                stopped_by = "max_seconds"
                break
            idx = rng.choice(n, size=min(batch, n), replace=False)
            batch_arrays = [arrays[k][idx] for k in names]
            if augment:
                batch_arrays = [mix_and_shift(rng, a, arrays[names[0]]) for a in batch_arrays]
            feeds = [paddle.to_tensor(a) for a in batch_arrays]
            with paddle.no_grad():
                ref = outputs(teacher(*feeds))
            got = outputs(student(*feeds))
            loss = sum(paddle.mean((g - r) ** 2) / (paddle.mean(r ** 2) + 1e-8) for g, r in zip(got, ref))
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses.append(float(loss))
            prog.write(json.dumps({"step": step + 1, "loss": losses[-1],
                                   "seconds": round(time.perf_counter() - t0, 2)}) + "\n")
            prog.flush()
    student.eval()
    return {"losses": losses, "seconds": time.perf_counter() - t0, "stopped_by": stopped_by,
            "augment": "mixup + shift of up to 2 px" if augment else None}


MAX_SHIFT = 2


def augmentable(arrays: dict, names: list[str]) -> bool:
    """One float NCHW image input: each batch is then a mixup of two calibration images
    shifted by up to ``MAX_SHIFT`` pixels. With 32 images a fine-tune that sees them as they
    are learns them and not the model (measured: docs/qat.md)."""
    a = arrays[names[0]]
    return len(names) == 1 and a.ndim == 4 and np.issubdtype(a.dtype, np.floating) and min(a.shape[2:]) > 4 * MAX_SHIFT


def mix_and_shift(rng, batch, pool):
    """``batch`` mixed with random images of ``pool`` (weights uniform in [0, 1]), then rolled
    by up to ``MAX_SHIFT`` pixels in each direction."""
    other = pool[rng.integers(0, len(pool), len(batch))]
    lam = rng.uniform(0.0, 1.0, (len(batch),) + (1,) * (batch.ndim - 1)).astype(batch.dtype)
    mixed = lam * batch + (1 - lam) * other
    dy, dx = (int(v) for v in rng.integers(-MAX_SHIFT, MAX_SHIFT + 1, 2))
    return np.roll(mixed, (dy, dx), axis=(2, 3)).astype(batch.dtype)


def outputs(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def show_progress(path: Path, steps: int, log, stop: threading.Event, label: str,
                  every: float = 2.0) -> None:
    """Tail the child's progress file: one line every few seconds (step, loss, seconds)."""
    shown = 0
    while not stop.wait(every):
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        if len(lines) > shown:
            try:
                last = json.loads(lines[-1])
            except ValueError:
                continue
            shown = len(lines)
            log(f"{label} step {last['step']}/{steps}: loss {last['loss']:.5f} ({last['seconds']:.0f}s)")


class ProgressWatcher:
    """``with ProgressWatcher(path, steps, log, "QAT"):`` tails ``path`` while the child runs."""

    def __init__(self, path: Path, steps: int, log, label: str):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=show_progress, args=(path, steps, log, self._stop, label),
                                        daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)
        return False


_TIMEOUT_PAD_S = 600          # the child's own bound is max_seconds; this covers start, search and save


def run_tune_job(ctx, pass_name: str, what: str, job, settings: dict, out_dir: Path, *,
                 label: str, hint: str) -> dict:
    """The parent side of a distillation fine-tune (QAT, prune): the calibration inputs go to
    ``workdir/<pass>/calibration.npz``; ``job(root, factory, weights, inputs, npz, settings,
    out_dir, progress)`` runs in a child with the progress shown; its record comes back, and its
    error is raised by kind (``config``: exit 2, else the pass failed)."""
    import shutil

    import numpy as np

    from ..errors import ConfigError, PassError
    from ..native import run_native

    project = ctx.project
    work = ctx.workdir / pass_name.split(".")[-1]
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    data = project.load_data("calibration")
    np.savez(work / "calibration.npz", **{s.name: data[s.name] for s in project.inputs})
    progress = work / "progress.jsonl"
    weights = str(project.weights) if project.weights is not None else None
    args = (str(project.root), project.spec.model.factory, weights, [s.model_dump() for s in project.inputs],
            str(work / "calibration.npz"), settings, str(out_dir), str(progress))
    log = work / f"{work.name}.log"
    with ProgressWatcher(progress, int(settings["steps"]), ctx.log, label):
        result = run_native(pass_name, what, job, args, log, timeout=float(settings["max_seconds"]) + _TIMEOUT_PAD_S,
                            hint=f"see {log}; {hint}")
    if "error" in result:
        cls, message, hint = result["error"]
        raise (ConfigError(message, hint=hint) if cls == "config" else PassError(pass_name, message, hint=hint))
    return result["ok"]
