"""Models from Paddle's own suites for the zoo (issue 45): PP-LCNet x0.5 and PP-HGNetV2-B0
(``paddleclas`` 2.6.0), PP-LiteSeg with STDC1 (``paddleseg`` 2.8.0) and PicoDet-S
(``paddledet`` 2.6.0, with PaddleDetection's multiclass NMS in the graph).

The wheels come from the package registry, installed ``--no-deps`` into a cache directory by
``make suite-models`` (``python tests/zoo/suite_models.py install``); nothing is downloaded
when the tests run (:func:`require` says what to run when the directory is missing). Their
package ``__init__`` files import heavy stacks (docs, data pipelines, pycocotools), so the model
modules are imported directly, below stub parent packages (a module with ``__path__`` and no
code; TOOLCHAIN items 21, 27).

Each model is trained briefly on sklearn's real data so its accuracy means something: the
classifiers on the handwritten digits (64x64), the segmenter on the digits' stroke masks
(64x64, 2 classes, mIoU), PicoDet on scenes of digits (32-64 px) pasted on crops of
``load_sample_images`` (10 classes, mAP@0.5; trained on 128x128 scenes, a quarter of the
compute, and exported and evaluated at 256x256). Then it is exported both ways, a PIR ``.json``
and a legacy ``.pdmodel`` (through ``edgeforge.passes.export_compat.legacy_apis()`` where plain
Paddle 3.3.1 fails; TOOLCHAIN item 28), and handed to edgeforge as an exported inference model
(``[model] inference``), as a user of those suites would.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import numpy as np
import paddle.nn as nn

WHEELS = ["paddleclas==2.6.0", "paddleseg==2.8.0", "paddledet==2.6.0", "pycocotools", "six", "typeguard==2.13.3"]
PACKAGES = Path(os.environ.get("EDGEFORGE_SUITE_PACKAGES",
                               Path.home() / ".cache" / "edgeforge" / "suite-packages"))
# packages whose __init__ must not run (imports listed in TOOLCHAIN items 21 and 27)
STUBS = {
    "paddleclas", "paddleclas.ppcls", "paddleclas.ppcls.arch", "paddleclas.ppcls.arch.backbone",
    "paddleclas.ppcls.arch.backbone.legendary_models",
    "paddleseg", "paddleseg.models", "paddleseg.models.backbones",
    "ppdet", "ppdet.modeling", "ppdet.modeling.backbones", "ppdet.modeling.necks", "ppdet.modeling.heads",
    "ppdet.modeling.losses",
}
SUITE = ["pp_lcnet", "pp_hgnetv2", "pp_liteseg", "picodet_s"]
FORMATS = ("legacy", "pir")
SIZES = {"pp_lcnet": 64, "pp_hgnetv2": 64, "pp_liteseg": 64, "picodet_s": 256}
KINDS = {"pp_lcnet": "classification", "pp_hgnetv2": "classification", "pp_liteseg": "segmentation",
         "picodet_s": "detection"}
# name -> (steps, batch, learning rate)
RECIPE = {"pp_lcnet": (200, 32, 3e-3), "pp_hgnetv2": (200, 32, 2e-3), "pp_liteseg": (150, 16, 3e-3),
          "picodet_s": (250, 16, 2e-3)}
PICO_CLASSES = 10
PICO_STRIDES = [8, 16, 32, 64]


# ------------------------------------------------------------------------- packages and imports


def install(target: Path = PACKAGES) -> Path:
    """pip install the wheels --no-deps into ``target`` (what ``make suite-models`` runs)."""
    if _installed(target):
        return target
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), *WHEELS],
                   check=True)
    return target


def _installed(target: Path) -> bool:
    return all((target / p).is_dir() for p in ("paddleclas", "paddleseg", "ppdet", "pycocotools", "typeguard"))


def require(target: Path = PACKAGES) -> Path | None:
    """The package directory, or None when ``make suite-models`` has not installed it."""
    return target if _installed(target) else None


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The packages in STUBS as empty modules with ``__path__``: their submodules import, their
    ``__init__`` never runs."""

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, name, path, target=None):
        if name not in STUBS:
            return None
        folder = self.root.joinpath(*name.split("."))
        if not (folder / "__init__.py").is_file():
            return None
        spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
        spec.submodule_search_locations = [str(folder)]
        return spec

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = list(spec.submodule_search_locations)
        return module

    def exec_module(self, module):
        pass


def suite_module(name: str, root: Path = PACKAGES):
    """Import a model module of the suites (e.g. ``ppdet.modeling.heads.pico_head``)."""
    if require(root) is None:
        raise RuntimeError(f"the suite wheels are not installed in {root}: run `make suite-models`")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder(root))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(name)


# ---------------------------------------------------------------------------------- the models


def build(name: str):
    """The model (paddle.nn.Layer, random init under seed 0); forward(x) gives the exported outputs."""
    import paddle

    paddle.seed(0)
    if name == "pp_lcnet":
        return suite_module("paddleclas.ppcls.arch.backbone.legendary_models.pp_lcnet").PPLCNet_x0_5(class_num=10)
    if name == "pp_hgnetv2":
        return suite_module("paddleclas.ppcls.arch.backbone.legendary_models.pp_hgnet_v2").PPHGNetV2_B0(class_num=10)
    if name == "pp_liteseg":
        return LiteSeg()
    if name == "picodet_s":
        return PicoDet()
    raise ValueError(f"not a suite model: {name}")


class LiteSeg(nn.Layer):
    """PP-LiteSeg/STDC1 on 2 classes; in eval mode the one logit map [N, 2, H, W]."""

    def __init__(self):
        super().__init__()
        stdc = suite_module("paddleseg.models.backbones.stdcnet")
        self.net = suite_module("paddleseg.models.pp_liteseg").PPLiteSeg(num_classes=2, backbone=stdc.STDC1())

    def forward(self, x):
        out = self.net(x)
        return out if self.training else out[0]


_OPS: list = []     # ppdet.modeling.ops, once imported (dy2static reads a global, not a closure)


class PicoDet(nn.Layer):
    """PicoDet-S (picodet_s_320_coco_lcnet's layers: LCNet x0.75, CSP-PAN 96, PicoHeadV2 with
    4 strides, reg_max 7) on 10 classes, with PaddleDetection's multiclass NMS: rows [M, 6]
    and per-image counts [N]. ``raw=True``: scores [N, C, A] and boxes [N, A, 4]."""

    def __init__(self):
        super().__init__()
        lcnet = suite_module("ppdet.modeling.backbones.lcnet")
        pan = suite_module("ppdet.modeling.necks.csp_pan")
        head = suite_module("ppdet.modeling.heads.pico_head")
        vfl = suite_module("ppdet.modeling.losses.varifocal_loss")
        _OPS[:] = [suite_module("ppdet.modeling.ops")]
        self.backbone = lcnet.LCNet(scale=0.75, feature_maps=[3, 4, 5])
        self.neck = pan.CSPPAN(in_channels=[i.channels for i in self.backbone.out_shape], out_channels=96,
                               num_features=4, use_depthwise=True)
        feat = head.PicoFeat(feat_in=96, feat_out=96, num_fpn_stride=4, num_convs=2, norm_type="bn",
                             share_cls_reg=True, use_se=True)
        self.head = head.PicoHeadV2(conv_feat=feat, num_classes=PICO_CLASSES, fpn_stride=PICO_STRIDES,
                                    feat_in_chan=96, reg_max=7, cell_offset=0.5,
                                    loss_class=vfl.VarifocalLoss(use_sigmoid=True, iou_weighted=True),
                                    loss_dfl=None, loss_bbox=None, static_assigner=None, assigner=None)
        self.raw = False

    def forward(self, x):
        feats = self.neck(self.backbone({"image": x}))
        scores, boxes = self.head.forward_eval(feats, export_post_process=True)
        if self.raw:
            return scores, boxes
        rows, counts, _ = _OPS[0].multiclass_nms(boxes, scores, score_threshold=0.05, nms_top_k=200, keep_top_k=32,
                                                 nms_threshold=0.6, normalized=False, return_index=False,
                                                 return_rois_num=True)
        return rows, counts


# ------------------------------------------------------------------------------------ the data


def _digits(size: int):
    import paddle
    from sklearn.datasets import load_digits

    d = load_digits()
    grey = (d.images / 16.0).astype("float32")[:, None]
    up = paddle.nn.functional.interpolate(paddle.to_tensor(grey), size=(size, size), mode="bilinear").numpy()
    x = np.repeat((up - 0.5) / 0.25, 3, axis=1).astype("float32")
    return x, d.target.astype("int64"), (up[:, 0] > 0.5).astype("int64")


def scenes(n: int, seed: int, size: int = 256, per_image: int = 3):
    """``n`` images [n, 3, size, size]: 1-``per_image`` digits (32-64 px, sklearn scans) on
    dimmed crops of sklearn's two sample photos; ground truth gt_boxes/gt_classes/gt_counts."""
    import paddle
    from sklearn.datasets import load_digits, load_sample_images

    photos = [p.astype("float32") / 255.0 for p in load_sample_images().images]
    d = load_digits()
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 3, size, size), "float32")
    boxes, classes, counts = [], [], []
    for i in range(n):
        p = photos[int(rng.integers(2))]
        r, c = int(rng.integers(p.shape[0] - size)), int(rng.integers(p.shape[1] - size))
        x[i] = 0.4 * p[r:r + size, c:c + size].transpose(2, 0, 1)
        k = int(rng.integers(1, per_image + 1))
        placed = []
        for _ in range(k * 10):
            if len(placed) == k:
                break
            s = int(rng.integers(32, 65))
            x0, y0 = int(rng.integers(0, size - s)), int(rng.integers(0, size - s))
            if any(x0 < b[2] and b[0] < x0 + s and y0 < b[3] and b[1] < y0 + s for b, _ in placed):
                continue
            j = int(rng.integers(len(d.images)))
            glyph = paddle.nn.functional.interpolate(paddle.to_tensor(d.images[j][None, None] / 16.0), size=(s, s),
                                                     mode="bilinear").numpy()[0, 0]
            x[i, :, y0:y0 + s, x0:x0 + s] = np.maximum(x[i, :, y0:y0 + s, x0:x0 + s], glyph)
            placed.append(((x0, y0, x0 + s, y0 + s), int(d.target[j])))
        boxes += [b for b, _ in placed]
        classes += [c for _, c in placed]
        counts.append(len(placed))
    x = (x - 0.5) / 0.25
    return (x.astype("float32"), np.array(boxes, "float32").reshape(-1, 4), np.array(classes, "int64"),
            np.array(counts, "int64"))


def _anchor_targets(boxes, classes, counts, size: int = 256):
    """Per image the [C, A] score targets and [A, 4] box targets of PicoHeadV2's anchor points
    (cell centres of each stride): an anchor is positive for a box when its centre lies in the
    box's middle half and its stride suits the box (size / stride in [3, 12])."""
    centres, strides = [], []
    for s in PICO_STRIDES:
        n = size // s
        ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        centres.append(np.stack([(xs.ravel() + 0.5) * s, (ys.ravel() + 0.5) * s], 1))
        strides.append(np.full(n * n, s))
    centres, strides = np.concatenate(centres), np.concatenate(strides)
    a = len(centres)
    t_cls = np.zeros((len(counts), PICO_CLASSES, a), "float32")
    t_box = np.zeros((len(counts), a, 4), "float32")
    pos = np.zeros((len(counts), a), "float32")
    start = 0
    for i, k in enumerate(counts):
        for b, c in zip(boxes[start:start + k], classes[start:start + k]):
            w, h = b[2] - b[0], b[3] - b[1]
            cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
            inside = (np.abs(centres[:, 0] - cx) <= w / 4) & (np.abs(centres[:, 1] - cy) <= h / 4)
            fits = (w / strides >= 3) & (w / strides <= 12)
            m = inside & fits
            t_cls[i, c, m] = 1.0
            t_box[i, m] = b
            pos[i, m] = 1.0
        start += k
    return t_cls, t_box, pos


# --------------------------------------------------------------------------------- training


def train(name: str, seed: int = 0, log=None):
    """Build and briefly train the model; returns (layer in eval mode, data, facts).
    ``log(step, loss)`` every 25 steps, when given."""
    import paddle
    import paddle.nn.functional as F

    layer = build(name)
    steps, batch, lr = RECIPE[name]
    data = _data(name, seed)
    train_idx = data["train"]
    opt = paddle.optimizer.Adam(learning_rate=lr, parameters=layer.parameters())
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    layer.train()
    if name == "picodet_s":
        layer.raw = True
    for step in range(steps):
        b = train_idx[rng.integers(0, len(train_idx), batch)]
        x = paddle.to_tensor(data["x"][b])
        if name == "picodet_s":
            scores, boxes = layer(x)
            t_cls, t_box, pos = (paddle.to_tensor(v[b]) for v in data["targets"])
            n_pos = paddle.clip(pos.sum(), min=1.0)
            weight = 1.0 + 20.0 * t_cls
            loss = F.binary_cross_entropy(paddle.clip(scores, 1e-6, 1 - 1e-6), t_cls, weight=weight,
                                          reduction="sum") / n_pos
            loss = loss + ((boxes - t_box).abs().sum(-1) * pos).sum() / n_pos / 16.0
        elif name == "pp_liteseg":
            logits = layer(x)
            y = paddle.to_tensor(data["labels"][b])
            loss = sum(F.cross_entropy(paddle.transpose(o, [0, 2, 3, 1]), y) for o in logits)
        else:
            loss = F.cross_entropy(layer(x), paddle.to_tensor(data["labels"][b]))
        loss.backward()
        opt.step()
        opt.clear_grad()
        if log is not None and step % 25 == 0:
            log(step, float(loss))
    seconds = time.perf_counter() - t0
    _recalibrate_bn(layer, data["x"][train_idx[:128]])
    layer.eval()
    layer.raw = False
    facts = {"size": SIZES[name], "steps": steps, "batch": batch, "lr": lr, "loss": float(loss),
             "seconds": seconds, **_float_accuracy(name, layer, data)}
    return layer, data, facts


def _recalibrate_bn(layer, x: np.ndarray) -> None:
    """BatchNorm statistics measured again on training images (momentum 0: the batch's own),
    as benchmarks.common.digits_project does after its brief training."""
    import paddle

    bns = [m for m in layer.sublayers() if isinstance(m, paddle.nn.layer.norm._BatchNormBase)]
    saved = [m._momentum for m in bns]
    for m in bns:
        m._momentum = 0.0
    layer.train()
    with paddle.no_grad():
        layer(paddle.to_tensor(x[:32]))
    for m, mom in zip(bns, saved):
        m._momentum = mom


def _data(name: str, seed: int, calib: int = 32, evaluation: int = 64) -> dict:
    if name == "picodet_s":      # trained on 128x128 scenes (a quarter of the compute), same digit sizes
        x, boxes, classes, counts = scenes(640, seed + 1, size=128, per_image=2)
        ev = scenes(evaluation, seed + 5)
        cal = scenes(calib, seed + 3)[0]
        return {"x": x, "train": np.arange(len(x)), "targets": _anchor_targets(boxes, classes, counts, size=128),
                "eval": {"x": ev[0], "gt_boxes": ev[1], "gt_classes": ev[2], "gt_counts": ev[3]},
                "calib": {"x": cal}}
    x, labels, masks = _digits(SIZES[name])
    order = np.random.default_rng(seed).permutation(len(x))
    ev, cal = order[-evaluation:], order[-evaluation - calib:-evaluation]
    y = masks if name == "pp_liteseg" else labels
    return {"x": x, "labels": y, "train": order[:-evaluation - calib],
            "eval": {"x": x[ev], "labels": y[ev]}, "calib": {"x": x[cal]}}


def _float_accuracy(name: str, layer, data: dict) -> dict:
    """The float model's task metric on the evaluation set (edgeforge.task's own metrics)."""
    import paddle

    from edgeforge.task.evaluate import Task, evaluate

    ev = data["eval"]
    with paddle.no_grad():
        out = layer(paddle.to_tensor(ev["x"]))
    outs = [o.numpy() for o in (out if isinstance(out, (list, tuple)) else [out])]
    rec = evaluate(Task(kind=KINDS[name]), outs, outs, {k: v for k, v in ev.items() if k != "x"})
    kind = {"classification": "class", "segmentation": "miou", "detection": "map50"}[KINDS[name]]
    return {"float_accuracy": rec["float"], "accuracy_kind": kind, "metric": rec["metric"]}


# ------------------------------------------------------------------------------ the projects


def export(layer, prefix: Path, fmt: str, size: int) -> dict:
    """``paddle.jit.save`` as a user would: PIR (``fmt="pir"``, Paddle 3's default) or the
    legacy ProgramDesc; legacy through ``export_compat.legacy_apis()`` when plain Paddle fails."""
    import paddle
    from paddle.pir_utils import DygraphOldIrGuard, DygraphPirGuard

    from edgeforge.passes.export_compat import legacy_apis

    spec = [paddle.static.InputSpec([None, 3, size, size], "float32", "x")]
    if fmt == "pir":
        with DygraphPirGuard():
            paddle.jit.save(layer, str(prefix), input_spec=spec)
        return {"export": "pir"}
    try:
        with DygraphOldIrGuard():
            paddle.jit.save(layer, str(prefix), input_spec=spec)
        return {"export": "legacy"}
    except Exception as exc:                    # noqa: BLE001 - TOOLCHAIN item 28, recorded
        plain = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    with DygraphOldIrGuard(), legacy_apis():
        paddle.jit.save(layer, str(prefix), input_spec=spec)
    return {"export": "legacy (export_compat.legacy_apis)", "plain_legacy_export": plain}


def _factory(code: Path, name: str, layer) -> dict:
    """The model's code as a user has it, for ``edgeforge export --factory``: ``code/suite_factory.py``
    (builds the suite model) and the trained weights. Returns the export's arguments."""
    import paddle

    code.mkdir(parents=True, exist_ok=True)
    (code / "suite_factory.py").write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from suite_models import build


        def {name}():
            return build({name!r})
        """))
    paddle.save(layer.state_dict(), str(code / "weights.pdparams"))
    return {"dir": str(code), "factory": f"suite_factory:{name}", "weights": str(code / "weights.pdparams"),
            "input": f"x:-1,3,{SIZES[name]},{SIZES[name]}"}


def suite_project(root: Path, name: str, fmt: str, trained=None) -> tuple[Path, dict]:
    """Write the project: the exported program (``program/model``), calibration and evaluation
    data (with labels), ``[task]``. ``trained``: a (layer, data, facts) from :func:`train`
    to share between the two formats. Returns (root, facts); facts["export_error"] when
    ``paddle.jit.save`` itself fails (PicoDet's PIR export, TOOLCHAIN item 28)."""
    layer, data, facts = trained or train(name)
    facts = dict(facts, input=f"{SIZES[name]}x{SIZES[name]}, {'PIR .json' if fmt == 'pir' else 'legacy .pdmodel'}")
    (root / "data").mkdir(parents=True, exist_ok=True)
    np.savez(root / "data" / "calib.npz", **data["calib"])
    np.savez(root / "data" / "eval.npz", **data["eval"])
    try:
        facts.update(export(layer, root / "program" / "model", fmt, SIZES[name]))
    except Exception as exc:                    # noqa: BLE001 - the cell shows it
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
        facts["export_error"] = f"{type(exc).__name__}: {lines[0][:100]} … {lines[-1][:300]}"
        facts["factory"] = _factory(root / "code", name, layer)
    (root / "program" / "model.pdiparams.info").unlink(missing_ok=True)
    task = {"classification": "", "segmentation": '[task]\nkind = "segmentation"\n',
            "detection": '[task]\nkind = "detection"\nmax_metric_drop = 10\n'}[KINDS[name]]
    (root / "edgeforge.toml").write_text(textwrap.dedent(f"""\
        name = "{name.replace('_', '-')}-{fmt}"
        [model]
        inference = "program/model"
        [data]
        calibration = "data/calib.npz"
        evaluation = "data/eval.npz"
        """) + task)
    (root / "facts.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    return root, facts


if __name__ == "__main__":
    if sys.argv[1:] == ["install"]:
        print(f"suite wheels in {install()}")
    elif len(sys.argv) == 4 and sys.argv[1] in SUITE and sys.argv[2] in FORMATS:
        os.environ.setdefault("FLAGS_enable_pir_api", "0")
        _, f = suite_project(Path(sys.argv[3]), sys.argv[1], sys.argv[2])
        print({k: v for k, v in f.items()})
    else:
        sys.exit("usage: suite_models.py install | suite_models.py MODEL legacy|pir DIR")
