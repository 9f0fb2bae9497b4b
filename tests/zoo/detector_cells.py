"""The zoo's detectors (issue 25): the task tests' PicoDet-style anchor-grid head of real
digits (tests/task_models/tiny_detector.py: scores [N, C, A], boxes [N, A, 4]) with
PaddleDetection's ``multiclass_nms3`` in the graph (``det_nms``: rows [M, 6] + counts [N]), with
``matrix_nms`` in it (``det_matrix``: on ONNX the runner's matrix_nms after the graph, which ends
at boxes and scores) and without NMS (``det_raw``: raw outputs, NMS on the host). Their cells judge detections, not
arrays: mAP@0.5 against the labelled boxes (``[task] kind = "detection"``), the float model's
and the artifact's, within the task's budget (10 points); float columns within 0.5 points."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from zoo_common import Cell

DETECTORS = {"det_nms": "multiclass", "det_matrix": "matrix", "det_raw": False}
INPUT_TEXT = {"det_nms": "32x32 scenes, NMS in graph", "det_matrix": "32x32 scenes, matrix_nms in graph",
              "det_raw": "32x32 scenes, raw boxes"}
FLOAT_DROP = 0.5        # points of mAP@0.5, fp32 artifact against Paddle Inference float


def detector_project(root: Path, name: str) -> tuple[Path, dict]:
    from task_projects import detector_project as write

    t0 = time.perf_counter()
    write(root, nms=DETECTORS[name])          # a fixed 100 training steps
    seconds = time.perf_counter() - t0
    return root, {"size": 32, "input": INPUT_TEXT[name], "steps": 100, "seconds": seconds,
                  "float_accuracy": _float_map50(root), "accuracy_kind": "map50"}


def _float_map50(root: Path) -> float:
    import sys

    import paddle

    from edgeforge.task.detection import detection_scores, ground_truth
    from edgeforge.task.evaluate import detections
    from edgeforge.weights import load_state_dict

    sys.path.insert(0, str(root))
    try:
        import importlib

        det = importlib.import_module("tiny_detector")
        import re

        factory = re.search(r'factory = "tiny_detector:(\w+)"', (root / "edgeforge.toml").read_text()).group(1)
        layer = getattr(det, factory)()
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("tiny_detector", None)
    layer.set_state_dict({k: paddle.to_tensor(v) for k, v in load_state_dict(root / "det.pdparams").items()})
    layer.eval()
    with np.load(root / "data" / "eval.npz") as z:
        x, gt = z["x"], ground_truth(z["gt_boxes"], z["gt_classes"], z["gt_counts"])
    with paddle.no_grad():
        outs = [o.numpy() for o in layer(paddle.to_tensor(x))]
    return float(detection_scores(detections(outs), gt)["map50"])


def _figure(t: dict) -> str:
    return f"mAP@0.5 {t['artifact']:.3f} (float {t['float']:.3f})"


def _task(r) -> dict:
    t = r.manifest["verify"]["task"]
    assert (t["kind"], t["metric"], t["labelled"]) == ("detection", "map50", True), t
    return t


def lite_arm(r, int8: bool, int8_dir: Path | None = None) -> Cell:
    """device-only: the .nb exists; INT8: Paddle Inference on the fake-quant program that went
    into paddle_lite_opt (simulated INT8), its mAP@0.5 against the labels."""
    from edgeforge.paddle_env import paddle_inference
    from edgeforge.task.evaluate import Task, evaluate

    m = r.manifest
    assert r.verify_status == "device-only" and m["artifact"]["path"].endswith(".nb")
    size = (r.out_dir / m["artifact"]["path"]).stat().st_size
    t = _task(r)
    if not int8:
        return Cell(True, f"{size / 1e6:.2f} MB (.nb); float mAP@0.5 {t['float']:.3f}")
    with np.load(r.out_dir / m["reference"]["inputs"]) as z:
        data = {k: z[k] for k in z.files}
    names = [i["name"] for i in m["inputs"]]
    with np.load(r.out_dir / m["reference"]["outputs"]) as z:
        ref = [z[f"output_{i}"] for i in range(len(z.files))]
    sim = paddle_inference(int8_dir, {k: data[k] for k in names})
    rec = evaluate(Task(kind="detection"), sim, ref, {k: v for k, v in data.items() if k not in names})
    ok = rec["drop"] <= 10.0          # the project's [task] max_metric_drop
    fig = f"mAP@0.5 {rec['artifact']:.3f} (sim.; float {rec['float']:.3f}), {size / 1e6:.2f} MB"
    return Cell(ok, fig, note=None if ok else f"Lite arm int8: drop {rec['drop']:.2f} points")


def host(r, int8: bool) -> Cell:
    """verify ran the artifact: its mAP@0.5 within the budget (INT8) or 0.5 points (fp32) of
    the float model's; ONNX: verify.batches (batch 1 and 4) passed too."""
    v, t = r.manifest["verify"], _task(r)
    limit = 10.0 if int8 else FLOAT_DROP
    ok = v["status"] == "passed" and t["drop"] <= limit
    fig = _figure(t)
    if (r.manifest.get("nms") or {}).get("where") == "postprocess":
        fig += f"; {r.manifest['nms']['postprocess']['op']} by the runner"
    if "batches" in v:
        ok = ok and v["batches"]["status"] == "passed"
        fig += "; batch 1, 4 ✓" if v["batches"]["status"] == "passed" else "; batch 1, 4 ✗"
    note = None if ok else f"verify {v['status']}, drop {t['drop']:.2f} > {limit:g}. {v.get('reason') or ''}".strip()
    return Cell(ok, fig, note=note)
