"""Projects for the zoo's own models (custom_models.py), trained briefly on sklearn's digits.

Data: the 1797 real 8x8 digit scans, bilinear-upsampled to 32x32, one channel, normalised as
benchmarks.common.digits_images does. Targets: the class for the classifiers; for segmentation,
the stroke mask (upsampled intensity > 0.5 of full scale). The two-input model also gets each
digit's 16 row and column mean intensities. The split is digits_project's: the last
``evaluation`` shuffled digits are the evaluation set, the ``calib`` before them calibration.

Recurrent models (issue 25): ``crnn`` reads lines of four real digits side by side (16x16
glyphs, 16x64 lines; CTC over 10 digits + blank; accuracy = whole lines read right by greedy
decoding); the glyphs of the evaluation, calibration and training lines come from disjoint
digits. ``gru_cls`` reads a 16x16 digit row by row. ``digits_legacy`` and ``digits_pir`` are
the digits CNN handed over as an exported inference model (``[model] inference``, no factory):
a legacy ``.pdmodel`` and a PIR ``.json``.
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
    "crnn": ("CRNN", [("x", [-1, 1, 16, 64])], ("ctc",), (400, 32, 3e-3)),
    "gru_cls": ("GRUClassifier", [("x", [-1, 16, 16])], ("class",), (300, 32, 3e-3)),
    "digits_legacy": ("DigitsNet", [("x", [-1, 1, SIZE, SIZE])], ("class",), (200, 32, 3e-3)),
    "digits_pir": ("DigitsNet", [("x", [-1, 1, SIZE, SIZE])], ("class",), (200, 32, 3e-3)),
    "text_cls": ("TextClassifier", [("ids", [-1, 64])], ("class",), (300, 32, 2e-3)),
}
DTYPES = {"text_cls": "int64"}       # input dtype (default float32)
# free dimensions: input -> (min_shape, opt_shape, max_shape); verify runs the artifact at each
RANGES = {"text_cls": {"ids": ([1, 16], [4, 32], [8, 64])}}
INFERENCE = {"digits_legacy": "legacy", "digits_pir": "pir"}   # exported, then given as [model] inference
INPUT_TEXT = {"crnn": "16x64 (4 digits)", "gru_cls": "16 rows x 16", "digits_legacy": "32x32, legacy .pdmodel",
              "digits_pir": "32x32, PIR .json", "text_cls": "16-64 int64 tokens"}
SEQ_LEN = 4          # digits per CRNN line
BLANK = 10


def _glyphs(size: int):
    import paddle
    from sklearn.datasets import load_digits

    d = load_digits()
    grey = (d.images / 16.0).astype("float32")[:, None]
    up = paddle.nn.functional.interpolate(paddle.to_tensor(grey), size=(size, size), mode="bilinear").numpy()
    return d, grey, ((up - 0.5) / 0.25).astype("float32"), up


def digits_data(name: str = "", seed: int = 0, calib: int = 32, evaluation: int = 64) -> dict[str, np.ndarray]:
    """The model's data set; ``order`` is the permutation whose last ``evaluation`` entries are
    the evaluation set and the ``calib`` before them calibration."""
    if name == "crnn":
        return line_data(seed, calib, evaluation)
    if name == "text_cls":           # the 8x8 scan's intensities 0-16, row by row, as token ids
        from sklearn.datasets import load_digits

        d = load_digits()
        return {"x": d.images.reshape(len(d.images), 64).astype("int64"), "labels": d.target.astype("int64"),
                "order": np.random.default_rng(seed).permutation(len(d.target))}
    d, grey, x, up = _glyphs(16 if name == "gru_cls" else SIZE)
    if name == "gru_cls":
        x = x[:, 0]                                  # [N, 16 rows, 16 pixels]
    return {"x": x, "order": np.random.default_rng(seed).permutation(len(d.target)),
            "profile": np.concatenate([grey.mean(3)[:, 0], grey.mean(2)[:, 0]], axis=1).astype("float32"),
            "mask": (up > 0.5).astype("float32"), "labels": d.target.astype("int64")}


def line_data(seed: int, calib: int, evaluation: int, train_lines: int = 3000) -> dict[str, np.ndarray]:
    """Lines of SEQ_LEN real digits side by side; each split's lines from its own digits."""
    d, _, x, _ = _glyphs(16)
    glyphs = np.random.default_rng(seed).permutation(len(d.target))
    n_ev, n_cal = evaluation * SEQ_LEN, calib * SEQ_LEN
    pools = [glyphs[:-n_ev - n_cal], glyphs[-n_ev - n_cal:-n_ev], glyphs[-n_ev:]]
    rng = np.random.default_rng(seed + 1)
    lines = np.concatenate([rng.choice(pools[0], (train_lines, SEQ_LEN)),
                            pools[1].reshape(calib, SEQ_LEN), pools[2].reshape(evaluation, SEQ_LEN)])
    images = np.concatenate([x[lines[:, k]] for k in range(SEQ_LEN)], axis=3)     # [N, 1, 16, 64]
    return {"x": images.astype("float32"), "labels": d.target[lines].astype("int32"),
            "order": np.arange(len(lines))}


def ctc_decode(logits: np.ndarray) -> list[list[int]]:
    """Greedy CTC: the best class per column, repeats merged, blanks dropped."""
    out = []
    for best in logits.argmax(-1):
        seq = [int(c) for i, c in enumerate(best) if c != BLANK and (i == 0 or c != best[i - 1])]
        out.append(seq)
    return out


def _feeds(name: str, data: dict, idx) -> dict[str, np.ndarray]:
    names = [n for n, _ in CUSTOM[name][1]]
    return {n: data["profile" if n == "profile" else "x"][idx] for n in names}


def _loss(name: str, outs, data: dict, idx):
    import paddle
    import paddle.nn.functional as F

    total = 0.0
    for kind, out in zip(CUSTOM[name][2], outs):
        if kind == "ctc":
            n, t = out.shape[0], out.shape[1]
            total = total + F.ctc_loss(paddle.transpose(out, [1, 0, 2]), paddle.to_tensor(data["labels"][idx]),
                                       paddle.full([n], t, "int64"), paddle.full([n], SEQ_LEN, "int64"),
                                       blank=BLANK, reduction="mean")
        elif kind == "class":
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
    if kind == "ctc":
        return float(np.mean([seq == list(lab) for seq, lab in zip(ctc_decode(out), data["labels"][idx])]))
    if kind == "class":
        return float(np.mean(out.argmax(1) == data["labels"][idx]))
    return float(np.mean((out > 0) == (data["mask"][idx] > 0.5)))


def _free(shape: list, ranged) -> list:
    """``shape`` with every dimension its range lets vary written -1."""
    return shape if ranged is None else [-1 if lo != hi else d for d, lo, hi in zip(shape, ranged[0], ranged[2])]


def _write(root: Path, name: str) -> None:
    cls, inputs = CUSTOM[name][0], CUSTOM[name][1]
    (root / "data").mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "custom_models.py", root / "model.py")
    dtype = DTYPES.get(name, "float32")
    ranges = RANGES.get(name, {})
    specs = "".join(f'[[model.inputs]]\nname = "{n}"\nshape = {_free(s, ranges.get(n))}\ndtype = "{dtype}"\n'
                    + ("min_shape = {}\nopt_shape = {}\nmax_shape = {}\n".format(*ranges[n]) if n in ranges else "")
                    for n, s in inputs)
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
    data = digits_data(name, seed, calib, evaluation)
    order = data["order"]
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
    facts = {"size": SIZE, "input": INPUT_TEXT.get(name), "steps": steps, "batch": batch, "lr": lr, "loss": float(loss), "seconds": seconds,
             "float_accuracy": _accuracy(name, outs, data, ev),
             "accuracy_kind": {"mask_logits": "pixel", "ctc": "line"}.get(CUSTOM[name][2][0], "class")}
    from paddle.nn.layer.rnn import RNNBase

    sizes = {id(q): int(np.prod(q.shape)) for q in layer.parameters()}
    recurrent = {id(q) for sub in layer.sublayers() if isinstance(sub, RNNBase) for q in sub.parameters()}
    facts["recurrent_param_fraction"] = sum(sizes[i] for i in recurrent) / sum(sizes.values())
    paddle.save(layer.state_dict(), str(root / "weights.pdparams"))
    np.savez(root / "data/calib.npz", **_feeds(name, data, cal))
    np.savez(root / "data/eval.npz", **_feeds(name, data, ev))
    np.save(root / "data/labels.npy", data["labels"][ev])
    if name in INFERENCE:
        facts["route"] = INFERENCE[name]
        _as_inference(root, layer, name)
    return root, facts


def _as_inference(root: Path, layer, name: str) -> None:
    """Export the trained layer as a toolkit would (``program/model.pdmodel`` or
    ``program/model.json`` + ``.pdiparams``) and make the project name only that program."""
    import paddle
    from paddle.pir_utils import DygraphOldIrGuard, DygraphPirGuard

    spec = [paddle.static.InputSpec([None if d == -1 else d for d in s], "float32", n) for n, s in CUSTOM[name][1]]
    guard = DygraphPirGuard if INFERENCE[name] == "pir" else DygraphOldIrGuard
    with guard():
        paddle.jit.save(layer, str(root / "program" / "model"), input_spec=spec)
    (root / "program" / "model.pdiparams.info").unlink(missing_ok=True)
    (root / "edgeforge.toml").write_text(textwrap.dedent(f"""\
        name = "{name.replace('_', '-')}"
        [model]
        inference = "program/model"
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        """))
