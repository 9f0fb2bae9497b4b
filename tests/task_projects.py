"""Small task projects for the [task] tests: a conv-only CTC recogniser of real digit strings
and a tiny anchor-grid detector of real digits (tests/task_models), trained for seconds."""
from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np

MODELS = Path(__file__).resolve().parent / "task_models"


def ctc_project(root: Path, task: str = 'kind = "ctc"\nblank = 10\nmax_metric_drop = 5\n') -> Path:
    import paddle

    sys.path.insert(0, str(MODELS))
    try:
        import ctc_digits
    finally:
        sys.path.remove(str(MODELS))
    root.mkdir(parents=True)
    shutil.copy(MODELS / "ctc_digits.py", root / "ctc_digits.py")
    paddle.save(ctc_digits.train(seconds=10).state_dict(), str(root / "ctc.pdparams"))
    (root / "data").mkdir()
    x, labels = ctc_digits.strings(96, seed=5)
    np.savez(root / "data" / "calib.npz", x=ctc_digits.strings(64, seed=3)[0])
    np.savez(root / "data" / "eval.npz", x=x, labels=labels)
    (root / "edgeforge.toml").write_text(textwrap.dedent("""
        name = "ctc-digits"
        [model]
        factory = "ctc_digits:build"
        weights = "ctc.pdparams"
        [[model.inputs]]
        name = "x"
        shape = [-1, 1, 8, 32]
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        [task]
        """) + task)
    return root


def detector_project(root: Path, nms: bool = False) -> Path:
    """``nms``: matrix_nms in the graph (rows [M, 6] + counts [N]), else raw outputs."""
    import paddle

    sys.path.insert(0, str(MODELS))
    try:
        import tiny_detector as det
    finally:
        sys.path.remove(str(MODELS))
    root.mkdir(parents=True)
    shutil.copy(MODELS / "tiny_detector.py", root / "tiny_detector.py")
    state = det.train(seconds=8).state_dict()
    paddle.save({f"det.{k}" if nms else k: v for k, v in state.items()}, str(root / "det.pdparams"))
    (root / "data").mkdir()
    x, boxes, classes, counts = det.scenes(64, seed=5)
    np.savez(root / "data" / "calib.npz", x=det.scenes(64, seed=3)[0])
    np.savez(root / "data" / "eval.npz", x=x, gt_boxes=boxes, gt_classes=classes, gt_counts=counts)
    (root / "edgeforge.toml").write_text(textwrap.dedent("""
        name = "tiny-det"
        [model]
        factory = "tiny_detector:{factory}"
        weights = "det.pdparams"
        [[model.inputs]]
        name = "x"
        shape = [-1, 1, 32, 32]
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        [task]
        kind = "detection"
        max_metric_drop = 10
        """).replace("{factory}", "build_with_nms" if nms else "build"))
    return root
