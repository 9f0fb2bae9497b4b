"""``fold = true``'s pre-processing layer around the factory's layer, in the export child (see
:mod:`.fold`)."""
from __future__ import annotations

import numpy as np


def wrap(paddle, layer, fold: dict):
    """``layer`` behind the folded pre-processing (in the export child)."""
    scale = np.float32(fold["scale"]) / np.asarray(fold["std"], np.float32)
    shift = -np.asarray(fold["mean"], np.float32) / np.asarray(fold["std"], np.float32)
    bgr, nchw = fold["channel_order"] == "bgr", fold["layout"] == "NCHW"

    class Folded(paddle.nn.Layer):      # one input (Project.fold): forward's source is traced
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            # persistable constants (Paddle Lite's x86 kernels refuse assign_value's [1, 1, 1, 3])
            self.fold_scale = self._constant("fold_scale", scale)
            self.fold_shift = self._constant("fold_shift", shift)

        def _constant(self, name, value):
            p = self.create_parameter([1, 1, 1, 3], dtype="float32",
                                      default_initializer=paddle.nn.initializer.Assign(value.reshape(1, 1, 1, 3)))
            p.stop_gradient = True
            return p

        def forward(self, image):
            x = paddle.cast(image, "float32")
            if bgr:
                x = paddle.concat([x[:, :, :, 2:3], x[:, :, :, 1:2], x[:, :, :, 0:1]], axis=3)
            x = x * self.fold_scale + self.fold_shift
            if nchw:
                x = paddle.transpose(x, [0, 3, 1, 2])
            return self.inner(x)

    folded = Folded(layer)
    folded.eval()
    return folded
