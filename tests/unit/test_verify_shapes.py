"""verify.shapes' pieces (edgeforge/passes/verify_shapes.py): the feeds at each level of a
declared range (cropped or zero-padded along the free dimensions, a few samples) and a failed
size failing verify with one line that names it."""
from __future__ import annotations

import numpy as np

from edgeforge.passes.verify_shapes import SAMPLES, apply, fit, size_feeds
from edgeforge.project import InputSpec

X = InputSpec(name="x", shape=[-1, 3, 8, -1], min_shape=[1, 3, 8, 4], opt_shape=[1, 3, 8, 10],
              max_shape=[2, 3, 8, 20])
IDS = InputSpec(name="ids", shape=[-1, 5], dtype="int64")


def test_fit_crops_and_pads_at_the_end():
    a = np.arange(12, dtype="float32").reshape(1, 1, 1, 12)
    assert fit(a, [3], [1, 1, 1, 5]).tolist() == [[[[0, 1, 2, 3, 4]]]]
    padded = fit(a, [3], [1, 1, 1, 14])
    assert padded.shape == (1, 1, 1, 14) and padded[..., 12:].tolist() == [[[[0, 0]]]]
    assert padded.flags.c_contiguous


def test_size_feeds_per_level():
    feeds = {"x": np.ones((6, 3, 8, 12), "float32"), "ids": np.ones((6, 5), "int64")}
    shapes = {lv: {k: v.shape for k, v in size_feeds([X, IDS], feeds, lv).items()} for lv in ("min", "opt", "max")}
    # the batch: SAMPLES, within the declared batch range [1, 2]
    assert SAMPLES > 2
    assert shapes == {"min": {"x": (2, 3, 8, 4), "ids": (2, 5)}, "opt": {"x": (2, 3, 8, 10), "ids": (2, 5)},
                      "max": {"x": (2, 3, 8, 20), "ids": (2, 5)}}
    one = size_feeds([X], {"x": np.ones((1, 3, 8, 12), "float32")}, "max")["x"]
    assert one.shape == (2, 3, 8, 20)           # one sample, repeated up to the batch


def test_a_failed_size_fails_verify_naming_it():
    result = {"status": "passed"}
    records = [{"level": "min", "sizes": {"x": [2, 3, 8, 4]}, "status": "passed"},
               {"level": "max", "sizes": {"x": [2, 3, 8, 20]}, "status": "failed",
                "reason": "float output differs from Paddle Inference by 3.00e-02 (relative) > 0.0001"}]
    apply(result, records)
    assert result["status"] == "failed" and result["shapes"] == records
    assert result["reason"] == ("at x [2, 3, 8, 20] (max of the declared range): float output differs "
                                "from Paddle Inference by 3.00e-02 (relative) > 0.0001")
    kept = {"status": "failed", "reason": "cosine 0.9 < 0.99"}
    apply(kept, records)
    assert kept["reason"] == "cosine 0.9 < 0.99"        # the first failure is the one reported
    none = {"status": "passed"}
    apply(none, None)
    assert none == {"status": "passed"}
