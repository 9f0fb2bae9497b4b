"""The task metrics against hand-computed cases (edgeforge.task)."""
from __future__ import annotations

import numpy as np
import pytest

from edgeforge.task import detection as det
from edgeforge.task import metrics as m
from edgeforge.task.evaluate import Task, evaluate


def test_topk_and_agreement():
    logits = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2], [0.2, 0.3, 0.5], [0.4, 0.35, 0.25]])
    labels = np.array([1, 1, 0, 2])
    assert m.topk_accuracy(logits, labels, 1) == 0.25            # only sample 0
    assert m.topk_accuracy(logits, labels, 2) == 0.5             # + sample 1 (0.3 is 2nd)
    assert m.topk_accuracy(logits, labels, 3) == 1.0
    other = logits[:, [1, 0, 2]]                                  # swaps classes 0 and 1
    assert m.top1_agreement(other, logits) == 0.25               # top-1 1,0,2,0 vs 0,1,2,1
    assert m.top1_agreement(logits, logits) == 1.0


def test_two_boxes_and_one_miss():
    """Two ground-truth boxes, one found (score 0.9) and one false positive (0.8) elsewhere:
    recall 0.5 at precision 1, then precision 0.5; the envelope is 1 up to recall 0.5 and 0
    after, so 51 of 101 recall points score 1: AP = 51/101."""
    gt = [np.array([[0, 0, 0, 10, 10], [0, 20, 20, 30, 30]], dtype=float)]
    found = [np.array([[0, 0.9, 0, 0, 10, 10], [0, 0.8, 50, 50, 60, 60]], dtype=float)]
    assert det.mean_ap(found, gt) == pytest.approx(51 / 101)
    # the false positive scoring higher: precision 1/2 at recall 0.5 -> AP = 0.5 * 51/101
    worse = [np.array([[0, 0.7, 0, 0, 10, 10], [0, 0.8, 50, 50, 60, 60]], dtype=float)]
    assert det.mean_ap(worse, gt) == pytest.approx(0.5 * 51 / 101)
    # a box of IoU 0.6 (6x10 inside 10x10) matches at 0.5, 0.55 and 0.6 (AP 1); above, it is
    # a false positive after the exact box (AP 51/101 as above)
    loose = [np.array([[0, 0.8, 0, 0, 6, 10], [0, 0.9, 20, 20, 30, 30]], dtype=float)]
    s = det.detection_scores(loose, gt)
    assert s["map50"] == pytest.approx(1.0)
    assert s["map50_95"] == pytest.approx((3 * 1 + 7 * 51 / 101) / 10)


def test_classes_and_images_are_kept_apart():
    gt = det.ground_truth(np.array([[0, 0, 10, 10], [0, 0, 10, 10]]), np.array([0, 1]), np.array([1, 1]))
    # image 0's box of class 1 does not match image 1's class-1 truth, nor class 0's
    dets = [np.array([[1, 0.9, 0, 0, 10, 10], [0, 0.8, 0, 0, 10, 10]]), np.zeros((0, 6))]
    assert det.mean_ap(dets, gt) == pytest.approx(0.5)           # class 0: 1, class 1: 0


def test_rows_and_counts_split_and_nms():
    rows, counts = det.nms(np.array([[[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]]]),
                           np.array([[[0.9, 0.8, 0.1], [0.0, 0.0, 0.7]]]), score_threshold=0.5)
    assert counts.tolist() == [2]                                # the 0.8 box overlaps the 0.9 one
    assert rows[:, 0].tolist() == [0, 1] and rows[:, 1].tolist() == pytest.approx([0.9, 0.7])
    with pytest.raises(ValueError, match="add up"):
        det.split(rows, np.array([1]))


def test_artifact_against_float_detections():
    flt = np.array([[0, 0.9, 0, 0, 10, 10], [1, 0.8, 20, 20, 30, 30], [0, 0.1, 40, 40, 50, 50]], dtype=float)
    art = np.array([[0, 0.85, 0, 0, 10, 8], [0, 0.6, 20, 20, 30, 30]], dtype=float)
    r = evaluate(Task(kind="detection"), [art, np.array([2])], [flt, np.array([3])])
    # float's 0.9 and 0.8 boxes are the truth (0.1 is below 0.5); the artifact finds the first
    # (IoU 0.8, score error 0.05) and gives the second the wrong class: mAP = (1 + 0) / 2
    assert r["metric"] == "map50_vs_float" and r["float"] == 1.0
    assert r["artifact"] == pytest.approx(0.5) and r["drop"] == pytest.approx(50.0)
    fig = r["figures"]["artifact"]
    assert fig["matched"] == 1 and fig["matched_iou"] == pytest.approx(0.8)
    assert fig["score_error"] == pytest.approx(0.05)


def test_ctc_greedy_repeats_and_blanks():
    # steps: 1 1 0 1 2 2 0 0 3  ->  collapse repeats: 1 0 1 2 0 3  ->  drop blank 0: 1 1 2 3
    steps = [1, 1, 0, 1, 2, 2, 0, 0, 3]
    logits = np.eye(4)[steps][None]                              # [1, T=9, C=4]
    assert m.ctc_greedy(logits, blank=0) == [[1, 1, 2, 3]]
    assert m.ctc_greedy(np.swapaxes(logits, 0, 1), blank=0, time_axis=0) == [[1, 1, 2, 3]]
    assert m.ctc_greedy(np.eye(4)[[3, 3, 1]][None], blank=3) == [[1]]


def test_edit_distance_and_sequence_scores():
    assert m.edit_distance("kitten", "sitting") == 3
    assert m.edit_distance([], [1, 2]) == 2
    labels = np.array([[1, 1, 2, 3], [4, 5, -1, -1]])
    truth = m.unpad(labels)
    assert truth == [[1, 1, 2, 3], [4, 5]]
    s = m.sequence_scores([[1, 1, 2, 3], [4]], truth)
    assert s["sequence_accuracy"] == 0.5 and s["cer"] == pytest.approx(1 / 6)


def test_ctc_task_record_with_labels():
    good = np.eye(4)[[1, 0, 2, 2]][None]                         # decodes to [1, 2]
    bad = np.eye(4)[[1, 1, 1, 1]][None]                          # decodes to [1]
    r = evaluate(Task(kind="ctc", blank=0), [bad], [good], {"labels": np.array([[1, 2, -1]])})
    assert (r["metric"], r["float"], r["artifact"], r["drop"]) == ("sequence_accuracy", 1.0, 0.0, 100.0)
    assert r["figures"]["artifact"]["cer"] == 0.5


def test_segmentation_miou_and_pixel_accuracy():
    truth = np.array([[[0, 0], [1, 1]]])
    pred = np.array([[[0, 1], [1, 1]]])
    s = m.segmentation_scores(pred, truth, 2)
    # class 0: inter 1, union 2 -> 0.5; class 1: inter 2, union 3 -> 2/3
    assert s["miou"] == pytest.approx((0.5 + 2 / 3) / 2) and s["pixel_accuracy"] == 0.75
    logits = np.stack([pred == 0, pred == 1], axis=1).astype(float)   # [N, C, H, W]
    ref = np.stack([truth == 0, truth == 1], axis=1).astype(float)
    r = evaluate(Task(kind="segmentation"), [logits], [ref])
    assert r["metric"] == "miou_vs_float" and r["artifact"] == pytest.approx((0.5 + 2 / 3) / 2)


def test_recall_at_k_and_generic():
    emb = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]])
    assert m.recall_at_k(emb, np.array([0, 0, 1, 1]), 1) == 1.0
    assert m.recall_at_k(emb, np.array([0, 1, 0, 1]), 1) == 0.0   # every nearest is the other label
    # k=2: sample 1's second nearest is 3 (cos 0.22 > 0.11), a hit; sample 0's is 3, a miss
    assert m.recall_at_k(emb, np.array([0, 1, 0, 1]), 2) == 0.5
    assert m.recall_at_k(emb, np.array([0, 1, 0, 1]), 3) == 1.0
    a, b = np.array([[1.0, 0.0]]), np.array([[1.0, 1.0]])
    assert m.cosine(a, b) == pytest.approx(2 ** -0.5) and m.max_abs_error(a, b) == 1.0
    r = evaluate(Task(kind="generic"), [a], [b])
    assert r["metric"] == "cosine" and r["float"] == pytest.approx(1.0)
    assert r["drop"] == pytest.approx((1 - 2 ** -0.5) * 100)


def test_a_user_metric_runs_in_a_child(tmp_path):
    from edgeforge.errors import PassError
    from edgeforge.task.user import user_metric

    (tmp_path / "mymetric.py").write_text(
        "import os\n"
        "import numpy as np\n"
        "def mean_first(outputs, reference, labels):\n"
        "    return float(np.mean(outputs[0])) + (labels['labels'].sum() if labels else 0) + os.getpid() * 0\n"
        "def broken(outputs, reference, labels):\n"
        "    return 'high'\n")
    task = Task(kind="generic")
    score = user_metric(tmp_path, "mymetric:mean_first", tmp_path / "metric.log")
    r = evaluate(task, [np.full((2, 2), 0.25)], [np.full((2, 2), 0.5)], {"labels": np.array([1, 0])},
                 user=score, user_name="mymetric:mean_first")
    assert (r["metric"], r["float"], r["artifact"], r["drop"]) == ("mymetric:mean_first", 1.5, 1.25, 25.0)
    with pytest.raises(PassError, match="returned str, not a number"):
        evaluate(task, [np.ones((1, 1))], [np.ones((1, 1))],
                 user=user_metric(tmp_path, "mymetric:broken", tmp_path / "m2.log"))


def test_a_detector_without_float_boxes_names_score_threshold():
    """No float box at or above [task] score_threshold: nothing to measure against; a
    ConfigError naming the threshold and the best score, never a cosine fallback (issue 46)."""
    from edgeforge.errors import ConfigError

    flt = np.array([[0, 0.31, 0, 0, 10, 10], [1, 0.12, 20, 20, 30, 30]], dtype=float)
    with pytest.raises(ConfigError) as exc:
        evaluate(Task(kind="detection", score_threshold=0.5), [flt, np.array([2])], [flt, np.array([2])])
    line = exc.value.one_line()
    assert "score_threshold = 0.5" in line and "best score is 0.31" in line and "below 0.31" in line
    assert "\n" not in line
