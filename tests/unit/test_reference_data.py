"""What a bench ships and what the runner sends back, sized (edgeforge.passes.reference_data,
edgeforge.runner.metrics.packed_outputs): the sample count and the bound it buys, the
8 MB cap, stable bytes for one content, detection labels cut by image, the bounded outputs."""
from __future__ import annotations

import base64
import hashlib
import io

import numpy as np
import pytest

from edgeforge.passes import reference_data as rd
from edgeforge.runner.metrics import packed_outputs, reduce_outputs


def test_the_sample_count_fits_the_byte_cap_and_the_wilson_bound_is_stated():
    assert rd.device_samples(540, 4_200) == 540
    assert rd.device_samples(5000, 100) == rd.MAX_SAMPLES == 1000
    assert rd.device_samples(16, 1_573_000) == 5           # PP-LiteSeg-sized: 5 of 16 fit in 8 MB
    assert rd.device_samples(16, 50 << 20) == 1            # never none
    assert rd.wilson_low(1000, 1000) == pytest.approx(0.99617, abs=1e-5)
    assert rd.wilson_low(0, 10) == 0.0 and rd.wilson_low(5, 0) == 0.0
    assert ">= 99.6 % (95 % Wilson)" in rd.confidence(1000, 5000)


def test_the_device_reference_is_compressed_stable_and_cut_by_image(tmp_path):
    rng = np.random.default_rng(0)
    feeds = {"x": np.zeros((300, 1, 32, 32), np.float32)}
    labels = {"gt_boxes": rng.random((600, 4)).astype(np.float32), "gt_classes": np.arange(600) % 3,
              "gt_counts": np.full(300, 2)}
    ref = [rng.standard_normal((300, 8000)).astype(np.float32)]       # 32 KB of scores per image
    (tmp_path / "reference").mkdir()
    got = rd.write_device_reference(tmp_path, feeds, labels, ref)
    n = got["samples"]
    assert n == (8 << 20) // -(-sum(a.nbytes for a in (*feeds.values(), *labels.values(), *ref)) // 300)
    assert n < 300 and got["raw_bytes"] <= 8 << 20 and got["evaluation_samples"] == 300
    with np.load(tmp_path / rd.INPUTS) as z:
        assert len(z["x"]) == n and len(z["gt_counts"]) == n and len(z["gt_boxes"]) == 2 * n
    first = hashlib.sha256((tmp_path / rd.OUTPUTS).read_bytes()).hexdigest()
    rd.write_device_reference(tmp_path, feeds, labels, ref)
    assert hashlib.sha256((tmp_path / rd.OUTPUTS).read_bytes()).hexdigest() == first
    # NMS rows (not one per image): every image ships
    rows = [np.zeros((17, 6), np.float32), np.full(300, 0, np.int32)]
    assert rd.write_device_reference(tmp_path, feeds, {}, rows)["samples"] == 300


def _unpack(b64):
    with np.load(io.BytesIO(base64.b64decode(b64))) as z:
        return {k: z[k] for k in z.files}


def test_the_runner_sends_a_class_map_and_at_most_its_cap():
    scores = np.random.default_rng(1).standard_normal((8, 21, 64, 64)).astype(np.float32)
    small = reduce_outputs([scores], {"op": "argmax", "output": 0})
    assert small[0].dtype == np.uint8 and small[0].shape == (8, 64, 64)
    assert (small[0] == scores.argmax(1)).all()
    assert reduce_outputs([scores], {"op": "argmax", "output": 3})[0] is scores      # a bad index: untouched
    packed, n = packed_outputs([scores], max_bytes=1 << 20)        # 2.7 MB of noise: halved to fit
    assert n < 8 and len(base64.b64decode(packed)) <= 1 << 20
    assert (_unpack(packed)["output_0"] == scores[:n]).all()
    packed, n = packed_outputs(small)
    assert n == 8
    none, why = packed_outputs([scores], max_bytes=1000)
    assert none is None and "more than 1000" in why
