"""`[data] label_output`: the evaluation labels belong to one output of a multi-output model
(default the first); verify's accuracy and the INT8 budget's accuracy drop use that output,
and verify still reports every output."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from helpers import tiny_project

from edgeforge import api
from edgeforge.errors import ConfigError

MODEL = """
import paddle
import paddle.nn as nn
import paddle.nn.functional as F


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2D(1, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 16, 10)
        self.map = nn.Conv2D(8, 1, 1)

    def forward(self, x):
        f = F.relu(self.conv(x))
        return F.sigmoid(self.map(f)), self.fc(paddle.reshape(f, [-1, 8 * 16]))


def build():
    paddle.seed(0)
    return Net()
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """Labels: the float model's own classes (output 1), so its float accuracy is 100 %."""
    import paddle

    root = tiny_project(tmp_path_factory.mktemp("label-output") / "proj", "two-out", MODEL, [-1, 1, 4, 4],
                        samples=64)
    spec = importlib.util.spec_from_file_location("label_output_model", root / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    layer = module.build()
    layer.eval()
    with np.load(root / "data" / "eval.npz") as z:
        x = z["x"]
    with paddle.no_grad():
        labels = layer(paddle.to_tensor(x))[1].numpy().argmax(1)
    np.savez(root / "data" / "eval.npz", x=x, labels=labels.astype("int64"))
    return root


def _set(root, value: int) -> None:
    toml = root / "edgeforge.toml"
    text = "\n".join(ln for ln in toml.read_text().splitlines() if not ln.startswith("label_output"))
    toml.write_text(text.replace("[data]\n", f"[data]\nlabel_output = {value}\n"))


def test_accuracy_is_the_labelled_outputs(project, tmp_path):
    _set(project, 1)
    v = api.build(project, "linux-x86", precision="fp32", out=tmp_path / "fp32").manifest["verify"]
    assert v["status"] == "passed" and len(v["outputs"]) == 2
    assert v["float_accuracy"] == 1.0 and v["accuracy"] == 1.0
    assert v["outputs"][0]["accuracy"] is None         # the map: no classes
    m = api.build(project, "linux-x86", out=tmp_path / "int8").manifest
    ab = m["accuracy_budget"]
    assert ab["criterion"] == "accuracy_drop", ab
    assert m["verify"]["accuracy_drop"] == pytest.approx(ab["final"]["accuracy_drop"], abs=1e-6)
    assert m["verify"]["float_accuracy"] == 1.0


def test_default_is_the_first_output(project, tmp_path):
    _set(project, 0)
    v = api.build(project, "linux-x86", precision="fp32", out=tmp_path / "fp32").manifest["verify"]
    assert v["accuracy"] is None and v["outputs"][1]["accuracy"] == 1.0


def test_label_output_past_the_last_is_a_config_error(project, tmp_path):
    _set(project, 2)
    with pytest.raises(ConfigError, match=r"label_output = 2, but the model has 2 output"):
        api.build(project, "linux-x86", precision="fp32", out=tmp_path / "bad")


def test_label_output_past_a_one_output_model_is_exit_2_before_quantize(tmp_path):
    """issue 23: `label_output = 5` on a one-output model was an IndexError inside
    quantize.onnx (exit 3); it is exit 2 naming the key, right after export."""
    from helpers import run_cli
    from test_errors import assert_clean_failure

    src = "import paddle\n\n\ndef build():\n    paddle.seed(0)\n    return paddle.nn.Linear(4, 3)\n"
    root = tiny_project(tmp_path / "proj", "one-out", src, [-1, 4], samples=16)
    with np.load(root / "data" / "eval.npz") as z:
        x = z["x"]
    np.savez(root / "data" / "eval.npz", x=x, labels=(np.arange(len(x)) % 3).astype("int64"))
    _set(root, 5)
    out = tmp_path / "out"
    res = run_cli("build", str(root), "--target", "linux-x86", "--out", str(out))
    assert_clean_failure(res, 2, f"{root.resolve() / 'edgeforge.toml'}: [data] label_output = 5, "
                         "but the model has 1 output(s)", "use 0 to 0", out=out)
    assert "quantize" not in res.stderr and "IndexError" not in res.stderr
