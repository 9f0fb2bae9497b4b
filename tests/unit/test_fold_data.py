"""fold = true keeps the user's float data; dtype advice fits the values (issue 46). No paddle."""
from __future__ import annotations

import numpy as np
import pytest

from edgeforge.errors import ConfigError
from edgeforge.fold_data import dtype_hint, folded_input, unfolded_to_bytes

FOLD = {"input": "image", "shape": [-1, 3, 4, 5], "size": [4, 5], "layout": "NCHW", "channel_order": "bgr",
        "scale": 1 / 255, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def forward(x: np.ndarray) -> np.ndarray:
    y = x[..., ::-1].astype(np.float32) * np.float32(1 / 255)
    y = (y - np.asarray(FOLD["mean"], np.float32)) / np.asarray(FOLD["std"], np.float32)
    return np.transpose(y, (0, 3, 1, 2)).astype(np.float32)


def test_the_model_float_inputs_map_back_to_the_bytes():
    x = np.random.default_rng(0).integers(0, 256, (3, 4, 5, 3), dtype=np.uint8)
    assert np.array_equal(unfolded_to_bytes(forward(x), FOLD), x)
    assert unfolded_to_bytes(forward(x) + np.float32(0.01), FOLD) is None     # not whole pixels


def test_advice_never_casts_normalized_floats_to_uint8(tmp_path):
    x = np.random.default_rng(1).integers(0, 256, (2, 4, 5, 3), dtype=np.uint8)
    y = forward(x) + np.float32(0.1)
    with pytest.raises(ConfigError) as exc:
        folded_input(y, FOLD, "evaluation", True, tmp_path, [])
    line = exc.value.one_line()
    assert "the model's float inputs" in line and "astype" not in line and "fold = false" in line
    assert "astype('uint8')" in dtype_hint(np.array([0.0, 12.0, 255.0]), "uint8")
    assert "would change them" in dtype_hint(np.array([-2.1, 2.6]), "uint8")
    assert dtype_hint(np.array([1, 2], np.int64), "float32") == "convert it with arr.astype('float32')"
