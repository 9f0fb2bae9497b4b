"""[postprocess]: the runner's post-processing (top-k, CTC greedy, NMS) and the task figures of
its answers, against hand-computed cases; the end-to-end summary of hand-made samples."""
from __future__ import annotations

import numpy as np
import pytest

from edgeforge.project import PostprocessSection
from edgeforge.runner.end_to_end import _image_bytes, e2e_summary
from edgeforge.runner.limits import refuse_spec
from edgeforge.runner.postprocess import postprocess
from edgeforge.runner.protocol import BuildFault, EXIT_USAGE
from edgeforge.task.evaluate import Task, evaluate
from edgeforge.task.post import answer_figures, check, resolve


def test_topk_gives_classes_and_softmax_scores():
    a = postprocess([np.array([[1.0, 3.0, 2.0], [0.0, 0.0, 5.0]])], {"op": "topk", "k": 2})
    assert a["classes"].tolist() == [[1, 2], [2, 0]]
    e = np.exp([1.0, 3.0, 2.0])
    assert a["scores"][0] == pytest.approx([e[1] / e.sum(), e[2] / e.sum()], rel=1e-6)


def test_ctc_greedy_collapses_repeats_then_drops_blanks_and_pads():
    # steps 1 1 0 1 2 2 (blank 0) -> "1 1 2"; steps 0 0 0 0 0 0 -> ""
    steps = np.array([[1, 1, 0, 1, 2, 2], [0, 0, 0, 0, 0, 0]])
    a = postprocess([np.eye(3)[steps]], {"op": "ctc_greedy", "blank": 0, "time_axis": 1})
    assert a["text"].tolist() == [[1, 1, 2], [-1, -1, -1]]


def test_nms_keeps_the_best_of_two_overlapping_boxes_per_class():
    boxes = np.array([[[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]]], "float32")   # [1, 3, 4]
    scores = np.array([[[0.9, 0.8, 0.01], [0.0, 0.0, 0.7]]], "float32")                # [1, 2, 3]
    a = postprocess([boxes, scores], {"op": "nms", "boxes": 0, "scores": 1})
    assert a["counts"].tolist() == [2]          # box 1 (IoU 0.81 with box 0) suppressed; box 2 class 1
    assert a["rows"][:, :2].ravel().tolist() == pytest.approx([0, 0.9, 1, 0.7])
    assert a["rows"][0, 2:].tolist() == [0, 0, 10, 10]


def test_answer_figures_against_labels_and_float():
    task = Task(kind="classification", top_k=2)
    ans = {"classes": np.array([[1, 2], [2, 0], [0, 1]])}
    ref = {"classes": np.array([[1, 0], [0, 2], [0, 2]])}
    f = answer_figures(task, ans, ref, {"labels": np.array([1, 0, 2])})
    assert f == {"top1": pytest.approx(1 / 3), "top2": pytest.approx(2 / 3)}
    assert answer_figures(task, ans, ref, None) == {"top1_agreement": pytest.approx(2 / 3)}
    ctc = Task(kind="ctc", blank=0)
    text = {"text": np.array([[1, 2, -1], [3, -1, -1]])}
    f = answer_figures(ctc, text, text, {"labels": np.array([[1, 2], [3, 3]])})
    assert f["sequence_accuracy"] == 0.5 and f["cer"] == pytest.approx(1 / 4)


def test_the_record_of_answers_is_the_record_of_raw_outputs():
    """CTC: decoding on the runner then comparing text gives verify's figures from logits."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(8, 12, 5)).astype("float32")
    noisy = logits + rng.normal(scale=0.5, size=logits.shape).astype("float32")
    labels = {"labels": np.array([[1, 2, -1]] * 8)}
    task = Task(kind="ctc", blank=4)
    post = resolve(PostprocessSection(op="ctc_greedy").model_dump(), {"kind": "ctc", "blank": 4})
    assert post == {"op": "ctc_greedy", "output": 0, "blank": 4, "time_axis": 1}
    raw = evaluate(task, [noisy], [logits], labels)
    via = evaluate(task, postprocess([noisy], post), postprocess([logits], post), labels,
                   figures_of=answer_figures)
    assert (via["metric"], via["float"], via["artifact"]) == (raw["metric"], raw["float"], raw["artifact"])


def test_resolve_defaults_and_kind_checks():
    assert resolve(None, {"kind": "classification", "top_k": 3}) == {"op": "topk", "output": 0, "k": 3}
    assert resolve(None, {"kind": "detection"}) == {"op": "none"}
    assert resolve(None, None) == {"op": "none"}
    assert check({"op": "nms"}, "ctc") and check({"op": "nms"}, "detection") is None


def test_end_to_end_summary_of_hand_made_samples():
    s = e2e_summary({"decode": [1.0, 3.0], "preprocess": [1.0, 1.0], "infer": [2.0, 2.0],
                            "postprocess": [0.0, 2.0]})
    assert s["total"] == {"p50_ms": 6.0, "p99_ms": 8.0, "mean_ms": 6.0}       # totals 4 and 8
    assert s["stages"]["decode"] == {"p50_ms": 2.0, "p99_ms": 3.0, "mean_ms": 2.0}
    assert s["ai_tax"] == pytest.approx(8 / 12) and s["shares"]["infer"] == pytest.approx(4 / 12)


def test_the_runner_refuses_an_end_to_end_spec_over_its_bounds(capsys):
    base = {"runs": 3, "warmups": 0}
    assert refuse_spec("bench", {**base, "end_to_end": {"images": ["a.jpg"], "runs": 5}}) is None
    for e2e, says in (({"images": ["a.jpg"] * 17}, "1 to 16 images"),
                      ({"images": []}, "1 to 16 images"),
                      ({"images": ["a.jpg"], "runs": 10001}, "a count from 1 to 10000"),
                      ({"images": "a.jpg"}, "a list of images")):
        assert refuse_spec("bench", {**base, "end_to_end": e2e}) == EXIT_USAGE
        assert says in capsys.readouterr().out


def test_the_runner_refuses_an_image_of_too_many_pixels(tmp_path):
    from PIL import Image

    Image.new("RGB", (8000, 6000)).save(tmp_path / "big.png")        # 48 megapixels, a small file
    with pytest.raises(BuildFault, match="has 48000000 pixels"):
        _image_bytes(str(tmp_path), ["big.png"])
