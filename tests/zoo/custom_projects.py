"""Projects for the zoo's own models (custom_models.py), trained briefly on sklearn's digits.

Data: the 1797 real 8x8 digit scans, bilinear-upsampled to 32x32, one channel, normalised as
benchmarks.common.digits_images does. Targets: the class for the classifiers; for segmentation,
the stroke mask (upsampled intensity > 0.5 of full scale). The two-input model also gets each
digit's 16 row and column mean intensities. The split is digits_project's: the last
``evaluation`` shuffled digits are the evaluation set, the ``calib`` before them calibration.
"""
from __future__ import annotations

import shutil
import textwrap
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SIZE = 32
# name -> (factory class, inputs [(name, shape)], outputs the loss reads, (steps, batch, lr))
CUSTOM = {
    "vit_tiny": ("ViTTiny", [("x", [-1, 1, SIZE, SIZE])], ("class",), (300, 32, 2e-3)),
    "se_cnn": ("SECNN", [("x", [-1, 1, SIZE, SIZE])], ("class",), (300, 32, 3e-3)),
    "unet_seg": ("UNetSeg", [("x", [-1, 1, SIZE, SIZE])], ("mask_logits",), (150, 16, 3e-3)),
    "two_input": ("TwoInput", [("image", [-1, 1, SIZE, SIZE]), ("profile", [-1, 16])], ("class",),
                  (300, 32, 2e-3)),
    "two_output": ("TwoOutput", [("x", [-1, 1, SIZE, SIZE])], ("class", "mask"), (300, 32, 3e-3)),
}


def digits_data() -> dict[str, np.ndarray]:
    import paddle
    from sklearn.datasets import load_digits

    d = load_digits()
    grey = (d.images / 16.0).astype("float32")[:, None]
    up = paddle.nn.functional.interpolate(paddle.to_tensor(grey), size=(SIZE, SIZE), mode="bilinear").numpy()
    return {"x": ((up - 0.5) / 0.25).astype("float32"),
            "profile": np.concatenate([grey.mean(3)[:, 0], grey.mean(2)[:, 0]], axis=1).astype("float32"),
            "mask": (up > 0.5).astype("float32"), "labels": d.target.astype("int64")}


def _feeds(name: str, data: dict, idx) -> dict[str, np.ndarray]:
    names = [n for n, _ in CUSTOM[name][1]]
    return {n: data["profile" if n == "profile" else "x"][idx] for n in names}


def _loss(name: str, outs, data: dict, idx):
    import paddle
    import paddle.nn.functional as F

    total = 0.0
    for kind, out in zip(CUSTOM[name][2], outs):
        if kind == "class":
            total = total + F.cross_entropy(out, paddle.to_tensor(data["labels"][idx]))
        elif kind == "mask_logits":
            total = total + F.binary_cross_entropy_with_logits(out, paddle.to_tensor(data["mask"][idx]))
        else:
            total = total + F.binary_cross_entropy(out, paddle.to_tensor(data["mask"][idx]))
    return total


def _accuracy(name: str, outs, data: dict, idx) -> float:
    """Classification accuracy of the class output; pixel accuracy for the segmenter."""
    kind = CUSTOM[name][2][0]
    out = outs[0].numpy()
    if kind == "class":
        return float(np.mean(out.argmax(1) == data["labels"][idx]))
    return float(np.mean((out > 0) == (data["mask"][idx] > 0.5)))


def _write(root: Path, name: str) -> None:
    cls, inputs = CUSTOM[name][0], CUSTOM[name][1]
    (root / "data").mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "custom_models.py", root / "model.py")
    specs = "".join(f'[[model.inputs]]\nname = "{n}"\nshape = {s}\ndtype = "float32"\n' for n, s in inputs)
    (root / "edgeforge.toml").write_text(textwrap.dedent(f"""\
        name = "{name.replace('_', '-')}"
        [model]
        factory = "model:{cls}"
        weights = "weights.pdparams"
        """) + specs + textwrap.dedent("""\
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        """))


def custom_project(root: Path, name: str, calib: int = 32, evaluation: int = 64, seed: int = 0):
    """Write and train the project; returns (root, facts) like benchmarks.common.digits_project."""
    import importlib.util

    import paddle

    _write(root, name)
    data = digits_data()
    order = np.random.default_rng(seed).permutation(len(data["labels"]))
    ev, cal, train = order[-evaluation:], order[-evaluation - calib:-evaluation], order[:-evaluation - calib]
    spec = importlib.util.spec_from_file_location(f"zoo_custom_{name}", root / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    paddle.seed(seed)
    layer = getattr(module, CUSTOM[name][0])()
    steps, batch, lr = CUSTOM[name][3]
    opt = paddle.optimizer.Adam(learning_rate=lr, parameters=layer.parameters())
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    layer.train()
    for _ in range(steps):
        b = train[rng.integers(0, len(train), batch)]
        out = layer(*[paddle.to_tensor(v) for v in _feeds(name, data, b).values()])
        loss = _loss(name, out if isinstance(out, (list, tuple)) else [out], data, b)
        loss.backward()
        opt.step()
        opt.clear_grad()
    layer.eval()
    seconds = time.perf_counter() - t0
    with paddle.no_grad():
        out = layer(*[paddle.to_tensor(v) for v in _feeds(name, data, ev).values()])
    outs = out if isinstance(out, (list, tuple)) else [out]
    facts = {"size": SIZE, "steps": steps, "batch": batch, "lr": lr, "loss": float(loss), "seconds": seconds,
             "float_accuracy": _accuracy(name, outs, data, ev),
             "accuracy_kind": "pixel" if CUSTOM[name][2][0] == "mask_logits" else "class"}
    paddle.save(layer.state_dict(), str(root / "weights.pdparams"))
    np.savez(root / "data/calib.npz", **_feeds(name, data, cal))
    np.savez(root / "data/eval.npz", **_feeds(name, data, ev))
    np.save(root / "data/labels.npy", data["labels"][ev])
    return root, facts
