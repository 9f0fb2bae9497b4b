"""Train DigitsNet on sklearn's digits (real data shipped with scikit-learn).

Writes digits.pdparams, data/calib.npz (calibration images from the training split) and
data/eval.npz (the held-out split, with labels). Runs in well under a minute on 2 cores.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("FLAGS_enable_pir_api", "0")
# Paddle's import-time and BatchNorm notices say nothing about this model: keep `make train` to
# its one line.
warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
warnings.filterwarnings("ignore", message="When training, we now always track", category=UserWarning)

import numpy as np  # noqa: E402  (after the warning filters above)
import paddle  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from model import DigitsNet  # noqa: E402


def load(seed: int = 0):
    digits = load_digits()
    images = digits.images.astype("float32") / 16.0                 # 0..16 -> 0..1
    images = np.kron(images, np.ones((1, 4, 4), dtype="float32"))     # 8x8 -> 32x32
    images = images[:, None, :, :]
    return train_test_split(images, digits.target.astype("int64"), test_size=0.3,
                            random_state=seed, stratify=digits.target)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--calibration-size", type=int, default=320)
    args = ap.parse_args(argv)

    paddle.seed(0)
    np.random.seed(0)
    x_train, x_test, y_train, y_test = load()
    model = DigitsNet()
    opt = paddle.optimizer.Adam(learning_rate=2e-3, parameters=model.parameters())
    loss_fn = paddle.nn.CrossEntropyLoss()
    start = time.time()
    rng = np.random.default_rng(0)
    for _epoch in range(args.epochs):
        model.train()
        order = rng.permutation(len(x_train))
        for i in range(0, len(order), 64):
            idx = order[i:i + 64]
            loss = loss_fn(model(paddle.to_tensor(x_train[idx])), paddle.to_tensor(y_train[idx]))
            loss.backward()
            opt.step()
            opt.clear_grad()
    model.eval()
    with paddle.no_grad():
        pred = model(paddle.to_tensor(x_test)).numpy().argmax(1)
    acc = float((pred == y_test).mean())
    out = args.out
    (out / "data").mkdir(parents=True, exist_ok=True)
    paddle.save(model.state_dict(), str(out / "digits.pdparams"))
    calib = x_train[rng.permutation(len(x_train))[: args.calibration_size]]
    np.savez(out / "data" / "calib.npz", x=calib)
    np.savez(out / "data" / "eval.npz", x=x_test, labels=y_test)
    print(f"trained DigitsNet in {time.time() - start:.1f}s: held-out accuracy {acc * 100:.2f}% "
          f"on {len(y_test)} images")
    print(f"wrote digits.pdparams, data/calib.npz and data/eval.npz in {out}")
    return 0 if acc >= 0.97 else 1


if __name__ == "__main__":
    raise SystemExit(main())
