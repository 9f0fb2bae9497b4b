"""issue 46, init learns tasks: ``init --task detection --labels instances.json`` and
``init --task segmentation --labels masks/`` on folders of real-digit images write a project
that builds for linux-x86 with the task metric in verify (mAP@0.5, mIoU against the labels);
``--task ctc --labels lines.txt`` writes the label strings as class ids with [task] blank. The
split is seeded and recorded: each evaluation row's source image is in data/split.json."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import tomli
from PIL import Image
from task_projects import MODELS

from helpers import run_cli


def _model(name: str):
    sys.path.insert(0, str(MODELS))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(MODELS))


def _build(project: Path, out: Path, *flags: str) -> dict:
    res = run_cli("build", str(project), "--target", "linux-x86", "--out", str(out), "-q", *flags)
    assert res.returncode == 0, res.stderr
    return json.loads((out / "manifest.json").read_text())


def _eval_sources(project: Path) -> list[str]:
    return json.loads((project / "data" / "split.json").read_text())["evaluation"]


def _detection_project(tmp_path) -> Path:
    """Scenes of two digits drawn at 64x64 (2x the input), boxes in COCO [x, y, w, h] at 64x64,
    categories with ids 3 and 7: init scales the boxes to the 32x32 input and maps the
    categories to classes 0 and 1 in id order (checked row by row). Returns the project."""
    import paddle

    det = _model("tiny_detector")
    work = tmp_path / "user"
    (work / "images" / "sub").mkdir(parents=True)
    shutil.copy(MODELS / "tiny_detector.py", work)
    paddle.save(det.train(seconds=8).state_dict(), str(work / "det.pdparams"))
    x, boxes, classes, counts = det.scenes(60, seed=5)
    coco = {"images": [], "annotations": [], "categories": [{"id": 7, "name": "high"}, {"id": 3, "name": "low"}]}
    start = np.concatenate([[0], np.cumsum(counts)])
    for i in range(len(x)):
        name = f"{'sub/' if i % 2 else ''}scene{i:03d}.png"
        img = np.kron((x[i, 0] * 255).round().astype("uint8"), np.ones((2, 2), "uint8"))
        Image.fromarray(img, "L").save(work / "images" / name)
        coco["images"].append({"id": 100 + i, "file_name": name, "width": 64, "height": 64})
        for b, c in zip(boxes[start[i]:start[i + 1]], classes[start[i]:start[i + 1]]):
            x1, y1, x2, y2 = (b * 2).tolist()
            coco["annotations"].append({"id": len(coco["annotations"]), "image_id": 100 + i, "iscrowd": 0,
                                        "bbox": [x1, y1, x2 - x1, y2 - y1], "category_id": [3, 7][int(c)]})
    (work / "instances.json").write_text(json.dumps(coco))
    res = run_cli("init", "proj", "--factory", "tiny_detector:build", "--weights", "det.pdparams",
                  "--input", "x:-1,1,32,32", "--data", "images", "--task", "detection",
                  "--labels", "instances.json", "--max-metric-drop", "10", cwd=work)
    assert res.returncode == 0, res.stderr
    assert "boxes: " in res.stdout and "scaled to the input's 32x32 pixels" in res.stdout
    project = work / "proj"
    shutil.copy(MODELS / "tiny_detector.py", project)
    doc = tomli.loads((project / "edgeforge.toml").read_text())
    assert doc["task"] == {"kind": "detection", "label_names": ["low", "high"], "max_metric_drop": 10}
    with np.load(project / "data" / "eval.npz") as z:
        ev = {k: z[k] for k in z.files}
    rows = _eval_sources(project)
    k = 0
    for j, src in enumerate(rows):                         # every row's boxes are its source's
        i = int(Path(src).stem[5:])
        n = int(ev["gt_counts"][j])
        np.testing.assert_allclose(ev["gt_boxes"][k:k + n], boxes[start[i]:start[i + 1]], atol=1e-5)
        np.testing.assert_array_equal(ev["gt_classes"][k:k + n], classes[start[i]:start[i + 1]])
        k += n
    assert k == len(ev["gt_boxes"]) and len(rows) == 40
    return project


# make test-slow (50 s on 2 loaded cores with its init; 12 s in a 28-min make test): the build
# reading init's labels. The default suite keeps the init (test_init_writes_each_rows_task_labels)
# and a detection build against labels (test_task_detection.py::test_map50_against_labels).
@pytest.mark.slow
def test_detection_from_coco_instances_builds_with_map(tmp_path):
    project = _detection_project(tmp_path)
    # fp32: the INT8 drop of a detector trained for 8 s depends on the host's load (1.7 to 27
    # points measured); what init gives the build (labels, [task]) is what is checked here
    t = _build(project, tmp_path / "out", "--precision", "fp32")["verify"]["task"]
    assert (t["kind"], t["metric"], t["labelled"]) == ("detection", "map50", True)
    # the model's quality after 8 s of training depends on the host's load (float 0.3-0.9 seen);
    # the labels' correctness is checked row by row above
    assert 0.0 <= t["float"] <= 1.0 and t["artifact"] == pytest.approx(t["float"], abs=0.02)


def _segmentation_project(tmp_path) -> Path:
    """Mask PNGs with an ignored row: init writes each evaluation row's mask. Returns the project."""
    import paddle

    seg = _model("stroke_segmenter")
    work = tmp_path / "user"
    (work / "images").mkdir(parents=True)
    (work / "masks").mkdir()
    shutil.copy(MODELS / "stroke_segmenter.py", work)
    paddle.save(seg.train().state_dict(), str(work / "seg.pdparams"))
    x, masks = seg.scenes(45, seed=4)
    masks[:, 0, :] = 255                                   # an ignored row
    for i in range(len(x)):
        Image.fromarray((x[i] * 255).round().astype("uint8"), "L").save(work / "images" / f"d{i:02d}.jpg",
                                                                         quality=95)
        Image.fromarray(masks[i].astype("uint8"), "L").save(work / "masks" / f"d{i:02d}.png")
    res = run_cli("init", "proj", "--factory", "stroke_segmenter:build", "--weights", "seg.pdparams",
                  "--input", "x:-1,1,32,32", "--data", "images", "--task", "segmentation",
                  "--labels", "masks", "--seed", "3", cwd=work)
    assert res.returncode == 0, res.stderr
    assert "masks: classes 0..1 (255 ignored)" in res.stdout
    project = work / "proj"
    shutil.copy(MODELS / "stroke_segmenter.py", project)
    with np.load(project / "data" / "eval.npz") as z:
        labels = z["labels"]
    for j, src in enumerate(_eval_sources(project)):
        np.testing.assert_array_equal(labels[j], masks[int(src[1:3])])
    return project


@pytest.mark.parametrize("make", [_detection_project, _segmentation_project], ids=["detection", "segmentation"])
def test_init_writes_each_rows_task_labels(tmp_path, make):
    """What init writes from COCO instances and from mask PNGs (the builds: the slow tests here)."""
    make(tmp_path)


# make test-slow (68 s on 2 loaded cores with its init): the INT8 build reading init's masks. The
# default suite keeps the init (test_init_writes_each_rows_task_labels) and a segmentation
# build's mIoU (test_task_segmentation.py::test_the_build_summary_reads_miou).
@pytest.mark.slow
def test_segmentation_from_mask_pngs_builds_with_miou(tmp_path):
    project = _segmentation_project(tmp_path)
    t = _build(project, tmp_path / "out")["verify"]["task"]
    assert (t["kind"], t["metric"], t["labelled"]) == ("segmentation", "miou", True)
    assert 0.5 < t["float"] <= 1.0 and "pixel_accuracy" in t["figures"]["float"], t


def test_ctc_from_lines_writes_class_ids_and_blank(tmp_path):
    ctc = _model("ctc_digits")
    x, labels = ctc.strings(12, seed=2)
    (tmp_path / "lines").mkdir()
    lines = []
    for i in range(len(x)):
        Image.fromarray((x[i, 0] * 255).round().astype("uint8"), "L").save(tmp_path / "lines" / f"l{i}.png")
        lines.append(f"lines/l{i}.png\t" + "".join(str(d) for d in labels[i] if d >= 0))
    (tmp_path / "gt.txt").write_text("\n".join(lines) + "\n")
    res = run_cli("init", "proj", "--factory", "ctc_digits:build", "--input", "x:-1,1,8,32", "--data", "lines",
                  "--task", "ctc", "--labels", "gt.txt", "--charset", "0123456789", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert tomli.loads((tmp_path / "proj" / "edgeforge.toml").read_text())["task"] == {"kind": "ctc", "blank": 10}
    with np.load(tmp_path / "proj" / "data" / "eval.npz") as z:
        got = z["labels"]
    for j, src in enumerate(_eval_sources(tmp_path / "proj")):
        np.testing.assert_array_equal(got[j], labels[int(Path(src).stem[1:])][:4])


@pytest.mark.parametrize("task, labels, fragment", [
    ("detection", None, "--task detection needs its labels"),
    ("detection", "bad.json", "not a COCO instances file"),
    ("detection", "partial.json", "no COCO image entry for 2 of the 3 images"),
    ("segmentation", "masks", "no mask PNG for 1 of the 3 images"),
    ("ctc", "gt.txt", "characters not in --charset"),
])
def test_task_labels_refused_with_one_line(tmp_path, task, labels, fragment):
    (tmp_path / "imgs").mkdir()
    (tmp_path / "masks").mkdir()
    for i in range(3):
        Image.new("L", (8, 8), 10 * i).save(tmp_path / "imgs" / f"{i}.png")
    for i in range(2):
        Image.new("L", (8, 8), 1).save(tmp_path / "masks" / f"{i}.png")
    (tmp_path / "bad.json").write_text(json.dumps({"images": [{"id": "x"}], "categories": []}))
    (tmp_path / "partial.json").write_text(json.dumps({"images": [{"id": 1, "file_name": "0.png"}],
                                                       "categories": [{"id": 1, "name": "a"}]}))
    (tmp_path / "gt.txt").write_text("0.png\t12\n1.png\t3x\n2.png\t4\n")
    extra = ["--labels", labels] if labels else []
    extra += ["--charset", "0123456789"] if task == "ctc" else []
    res = run_cli("init", "proj", "--factory", "m:Net", "--input", "x:-1,1,8,8", "--data", "imgs", "--task", task,
                  *extra, cwd=tmp_path)
    assert res.returncode == 2 and fragment in res.stderr and res.stderr.count("\n") == 1, res.stderr
    assert not (tmp_path / "proj").exists()


@pytest.mark.slow
def test_ctc_from_lines_builds_with_sequence_accuracy(tmp_path):
    import paddle

    ctc = _model("ctc_digits")
    work = tmp_path / "user"
    (work / "lines").mkdir(parents=True)
    shutil.copy(MODELS / "ctc_digits.py", work)
    paddle.save(ctc.train(seconds=600, steps=400).state_dict(), str(work / "ctc.pdparams"))   # by steps
    x, labels = ctc.strings(90, seed=5)
    rows = []
    for i in range(len(x)):
        Image.fromarray((x[i, 0] * 255).round().astype("uint8"), "L").save(work / "lines" / f"l{i:02d}.png")
        rows.append(f"l{i:02d}.png " + "".join(str(d) for d in labels[i] if d >= 0))
    (work / "gt.txt").write_text("\n".join(rows) + "\n")
    res = run_cli("init", "proj", "--factory", "ctc_digits:build", "--weights", "ctc.pdparams", "--input",
                  "x:-1,1,8,32", "--data", "lines", "--task", "ctc", "--labels", "gt.txt", "--charset", "0123456789",
                  "--max-metric-drop", "5", cwd=work)
    assert res.returncode == 0, res.stderr
    shutil.copy(MODELS / "ctc_digits.py", work / "proj")
    t = _build(work / "proj", tmp_path / "out")["verify"]["task"]
    assert (t["kind"], t["metric"], t["labelled"]) == ("ctc", "sequence_accuracy", True)
    assert 0.2 < t["float"] <= 1.0, t
