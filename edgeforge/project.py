"""A model project: a directory with an ``edgeforge.toml`` (factory, weights, inputs, data)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import numpy as np
from pydantic import Field, field_validator, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from .config import SELF_DESCRIBED, DTypes, Strict, parse_model, read_toml
from .errors import ConfigError
from .inference import RANGES
from .manifest import TensorName

PROJECT_FILE = "edgeforge.toml"


MAX_FREE_DIM = 65536                      # the largest size a declared range may reach
# [preprocess] bounds: what the runner computes stays finite in float32 and a size stays an
# image a device can hold (4096 x 4096 float32 x 3 channels is 201 MB)
MAX_SIDE, MAX_PIXELS = 8192, 4096 * 4096
MAX_SCALE, MAX_MEAN, STD_RANGE = 1e4, 1e4, (1e-6, 1e6)
MAX_CLASSES = 1 << 20                     # a class index (a CTC blank) beyond any model's


def _invalid(message: str) -> PydanticCustomError:
    """A validation error shown as ``message`` alone (it names its values: no "(got ...)")."""
    return PydanticCustomError(SELF_DESCRIBED, "{message}", {"message": message})


class InputSpec(Strict):
    """One model input. ``-1`` is a free dimension: the batch (dim 0) needs nothing more; a free
    dimension beyond it (an OCR line's width, a sequence length) needs its range, declared as
    ``min_shape``/``opt_shape``/``max_shape`` (all three, the rank of ``shape``, equal to it where
    it is fixed): export probes and verify's reference run at ``opt``, verify also runs the
    artifact at ``min`` and ``max`` (:mod:`edgeforge.passes.verify_shapes`), TensorRT gets them as
    its optimisation profile. Serialised without the ranges when none are given."""
    name: TensorName
    shape: list[int]
    dtype: DTypes = "float32"
    min_shape: Optional[list[int]] = None
    opt_shape: Optional[list[int]] = None
    max_shape: Optional[list[int]] = None

    @field_validator("shape")
    @classmethod
    def _shape(cls, v):
        if not v or any(d == 0 or d < -1 for d in v):
            raise ValueError("dimensions must be positive, or -1 for a free dimension")
        return v

    @model_validator(mode="after")
    def _ranges(self):
        given = [getattr(self, k) for k in RANGES]
        me = f"input '{self.name}'"
        if all(g is None for g in given):
            if self.free_dims:
                raise _invalid(f"{me} has a free dimension (-1) beyond the batch, at dim {self.free_dims[0]} of "
                               f"{self.shape}: add min_shape, opt_shape and max_shape to its [[model.inputs]] "
                               "(the range it takes), or give that dimension a size")
            return self
        if any(g is None for g in given):
            missing = ", ".join(k for k, g in zip(RANGES, given) if g is None)
            raise _invalid(f"{me}: give all three of min_shape, opt_shape and max_shape, or none ({missing} missing)")
        for key, g in zip(RANGES, given):
            if len(g) != len(self.shape):
                raise _invalid(f"{me}: {key} {g} has rank {len(g)}, shape {self.shape} has rank {len(self.shape)}")
        for i, (d, lo, mid, hi) in enumerate(zip(self.shape, *given)):
            if d != -1 and not lo == mid == hi == d:
                raise _invalid(f"{me}: dim {i} is fixed at {d} in shape, so min_shape, opt_shape and max_shape "
                               f"must all be {d} there (got {lo}, {mid}, {hi})")
            if not 1 <= lo <= mid <= hi <= MAX_FREE_DIM:
                raise _invalid(f"{me}: dim {i} needs 1 <= min <= opt <= max <= {MAX_FREE_DIM} "
                               f"(got {lo}, {mid}, {hi})")
        return self

    @model_serializer(mode="wrap")
    def _without_none(self, handler):
        """No ``min_shape: null``: a project without ranges keeps its cache keys and manifests."""
        return {k: v for k, v in handler(self).items() if v is not None or k not in RANGES}

    @property
    def ranged(self) -> bool:
        return self.min_shape is not None

    @property
    def free_dims(self) -> list[int]:
        """The dimensions beyond the batch that are free (-1): each has a declared range."""
        return [i for i, d in enumerate(self.shape) if d == -1 and i > 0]

    def probe_shape(self) -> list[int]:
        """A concrete shape to probe the model with: ``opt`` along the free dimensions beyond the
        batch, the batch at 1 (or the range's min), fixed dimensions as they are."""
        if not self.ranged:
            return [1 if d == -1 else d for d in self.shape]
        return [max(1, self.min_shape[0]) if i == 0 and d == -1 else (self.opt_shape[i] if d == -1 else d)
                for i, d in enumerate(self.shape)]


def probe_shape(spec: dict) -> list[int]:
    """:meth:`InputSpec.probe_shape` of an input as a dict (what the child processes get)."""
    return InputSpec(**spec).probe_shape()


class ModelSection(Strict):
    """Either a ``factory`` (module:callable returning a paddle.nn.Layer, ``weights`` optional,
    ``[[model.inputs]]`` required) or an exported ``inference`` program's path prefix (its
    inputs come from the program; ``[[model.inputs]]`` may narrow them)."""
    factory: Optional[str] = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    inference: Optional[str] = Field(None, min_length=1)
    weights: Optional[str] = None
    inputs: list[InputSpec] = []

    @model_validator(mode="after")
    def _one_model(self):
        if (self.factory is None) == (self.inference is None):
            raise ValueError("give exactly one of factory = \"module:Class\" and "
                             "inference = \"path/prefix\" (an exported prefix.pdmodel)")
        if self.inference is not None and self.weights is not None:
            raise ValueError("an inference model holds its own parameters (prefix.pdiparams): drop weights")
        if self.factory is not None and not self.inputs:
            raise ValueError("a factory needs its inputs: add [[model.inputs]] (name, shape, dtype)")
        return self


class DataSection(Strict):
    calibration: str
    evaluation: str
    label_output: int = Field(0, ge=0)     # which model output the evaluation labels are for


class QatSection(Strict):
    """[quantization.qat]: quantization-aware fine-tuning (the quantize.qat pass)."""
    auto: bool = False                  # run it whenever PTQ keeps layers in float
    steps: int = Field(300, gt=0, le=100_000)
    max_seconds: float = Field(240.0, gt=0, le=86400)
    # Adam's learning rate; by default the engine's (passes.qat.DEFAULT_LR)
    lr: Optional[float] = Field(None, gt=0, le=1)
    batch_size: int = Field(32, gt=0, le=4096)


class PruneSection(Strict):
    """[prune]: structured filter pruning, then a distillation fine-tune (the prune pass)."""
    flops: Optional[float] = Field(None, gt=0, le=0.95)   # the share of FLOPs to remove; --prune
    steps: int = Field(300, gt=0, le=100_000)
    max_seconds: float = Field(240.0, gt=0, le=86400)
    lr: float = Field(1e-4, gt=0, le=1)
    batch_size: int = Field(32, gt=0, le=4096)


class QuantizationSection(Strict):
    qat: QatSection = Field(default_factory=QatSection)
    max_seconds: Optional[float] = Field(None, gt=0, le=86400, allow_inf_nan=False)  # the INT8 search's wall time


class TaskSection(Strict):
    """[task]: what the model is for, so drift and budgets are in the task's own metric."""
    kind: Literal["classification", "detection", "segmentation", "ctc", "embedding", "generic"] = "classification"
    blank: int = Field(0, ge=0, lt=MAX_CLASSES)     # ctc: the blank class
    time_axis: Literal[0, 1] = 1                    # ctc: [N, T, C] (1) or [T, N, C] (0)
    top_k: int = Field(5, ge=1, le=1000)            # classification top-k, embedding recall@k
    score_threshold: float = Field(0.5, ge=0, le=1)  # detection vs float: float boxes taken as truth
    metric: Optional[str] = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    max_metric_drop: Optional[float] = Field(None, ge=0, le=100)   # points of the task metric
    label_names: list[str] = Field([], max_length=MAX_CLASSES)   # class names, for pipeline.json


# the numbers of [preprocess], each finite and bounded (a NaN mean would reach pipeline.json)
Side = Annotated[int, Field(ge=1, le=MAX_SIDE)]
Mean = Annotated[float, Field(ge=-MAX_MEAN, le=MAX_MEAN, allow_inf_nan=False)]
Std = Annotated[float, Field(ge=STD_RANGE[0], le=STD_RANGE[1], allow_inf_nan=False)]


class PreprocessSection(Strict):
    """[preprocess]: the image pipeline in front of one model input, declared once; verify
    checks it against the training-time ``reference`` and writes it to pipeline.json."""
    input: str = Field(min_length=1)                # the model input an image feeds
    images: str = Field(min_length=1)               # raw JPEG/PNG files: the parity check
    reference: Optional[str] = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    resize: Optional[list[Side]] = Field(None, min_length=2, max_length=2)   # [h, w]
    resize_short: Optional[int] = Field(None, gt=0, le=MAX_SIDE)
    crop: Optional[list[Side]] = Field(None, min_length=2, max_length=2)     # [h, w], centred
    interpolation: Literal["nearest", "bilinear", "bicubic", "area"] = "bilinear"
    channel_order: Literal["rgb", "bgr"] = "rgb"
    scale: float = Field(1.0 / 255.0, gt=0, le=MAX_SCALE, allow_inf_nan=False)  # applied first
    mean: list[Mean] = Field(default_factory=lambda: [0.0, 0.0, 0.0], min_length=3, max_length=3)
    std: list[Std] = Field(default_factory=lambda: [1.0, 1.0, 1.0], min_length=3, max_length=3)
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    fold: bool = False
    tolerance: float = Field(1e-3, ge=0, le=1e6, allow_inf_nan=False)   # max abs tensor difference

    @model_validator(mode="after")
    def _sizes(self):
        if (self.resize is None) == (self.resize_short is None):
            raise ValueError("give resize = [h, w], or resize_short = N with crop = [h, w]")
        if self.resize_short is not None and self.crop is None:
            raise ValueError("resize_short needs crop = [h, w]")
        for key in ("resize", "crop"):
            hw = getattr(self, key)
            if hw is not None and hw[0] * hw[1] > MAX_PIXELS:
                raise _invalid(f"{key} = {hw} is {hw[0] * hw[1]} pixels; at most {MAX_PIXELS} "
                               f"(4096 x 4096) reach the model")
        return self


class PostprocessSection(Strict):
    """[postprocess]: what turns the model's outputs into the task's answers, run by the runner
    (on the host in verify, on the device in bench): top-k (softmax), CTC greedy decoding, or
    box decoding + NMS for a detector whose graph has none (scores [N, C, A], boxes [N, A, 4]):
    multiclass_nms3's (nms) or matrix_nms's (matrix_nms)."""
    op: Literal["none", "topk", "ctc_greedy", "nms", "matrix_nms"]
    output: int = Field(0, ge=0, le=63)             # topk, ctc_greedy: the output read
    k: int = Field(5, ge=1, le=1000)                # topk
    softmax: bool = True                            # topk: scores as probabilities
    blank: Optional[int] = Field(None, ge=0, lt=MAX_CLASSES)   # ctc_greedy (default: [task] blank)
    time_axis: Optional[Literal[0, 1]] = None       # ctc_greedy (default: [task] time_axis)
    boxes: int = Field(0, ge=0, le=63)              # nms: the output holding boxes [N, A, 4]
    scores: int = Field(1, ge=0, le=63)             # nms: the output holding scores [N, C, A]
    score_threshold: float = Field(0.05, ge=0, le=1)
    iou_threshold: float = Field(0.5, gt=0, le=1)
    keep_top_k: int = Field(100, ge=1, le=1000)
    # nms, as Paddle's multiclass_nms3 takes them (unset: every box above the threshold,
    # pixel-free IoU, no background class, a fixed threshold)
    nms_top_k: Optional[int] = Field(None, ge=-1, le=10000)
    normalized: Optional[bool] = None
    background_label: Optional[int] = Field(None, ge=-1, le=10000)
    nms_eta: Optional[float] = Field(None, gt=0, le=1)
    # matrix_nms, as Paddle's matrix_nms takes them (unset: the runner's defaults, Paddle's)
    post_threshold: Optional[float] = Field(None, ge=0, le=1)
    use_gaussian: Optional[bool] = None
    gaussian_sigma: Optional[float] = Field(None, gt=0, le=100)


class ProjectSpec(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    model: ModelSection
    data: DataSection
    quantization: QuantizationSection = Field(default_factory=QuantizationSection)
    prune: PruneSection = Field(default_factory=PruneSection)
    task: Optional[TaskSection] = None
    preprocess: Optional[PreprocessSection] = None
    postprocess: Optional[PostprocessSection] = None


class Project:
    """A loaded project: the spec plus the directory it lives in."""

    def __init__(self, root: Path, spec: ProjectSpec):
        self.root = root
        self.spec = spec
        self._inputs: list[InputSpec] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def inference(self) -> Path | None:
        """The exported program's path prefix (``[model] inference``), or None for a factory."""
        return self.path(self.spec.model.inference) if self.spec.model.inference else None

    @property
    def inputs(self) -> list[InputSpec]:
        """``[[model.inputs]]``; for an inference model the program's, narrowed by them (read
        once, in a child process). With ``fold = true`` the folded input is as the artifact
        takes it: uint8 ``[-1, H, W, 3]``."""
        if self.inference is None:
            fold = self.fold
            if fold is not None:
                h, w = fold["size"]
                return [s.model_copy(update={"shape": [-1, h, w, 3], "dtype": "uint8", **dict.fromkeys(RANGES)})
                        if s.name == fold["input"] else s for s in self.spec.model.inputs]
            return self.spec.model.inputs
        if self._inputs is None:
            where = f"{self.root / PROJECT_FILE}: [model] inference"
            self._inputs = [parse_model(InputSpec, s, where) for s in _program_inputs(self)]
        return self._inputs

    @property
    def fold(self) -> dict | None:
        """``[preprocess] fold = true``: what the export wraps around the factory's layer and
        verify checks (see :mod:`edgeforge.passes.fold`); None without it."""
        pre = self.spec.preprocess
        if pre is None or not pre.fold:
            return None
        if self.spec.model.factory is None:
            raise ConfigError("[preprocess] fold = true needs [model] factory: an exported inference program "
                              "has no layer to wrap", hint="use fold = false, or give the model's factory")
        names = [s.name for s in self.spec.model.inputs]
        if pre.input not in names:
            raise ConfigError(f"[preprocess] input = \"{pre.input}\" is not a model input ({', '.join(names)})")
        if len(names) != 1:
            raise ConfigError(f"[preprocess] fold = true folds into a model of one input; this one has "
                              f"{len(names)} ({', '.join(names)})", hint="use fold = false")
        spec = self.spec.model.inputs[0]
        h, w = pre.crop or pre.resize
        want = [-1, 3, h, w] if pre.layout == "NCHW" else [-1, h, w, 3]
        if spec.dtype != "float32" or len(spec.shape) != 4 or spec.shape[1:] != want[1:]:
            raise ConfigError(f"[preprocess] fold = true: input {spec.name} is {spec.dtype} {spec.shape}; the "
                              f"pre-processing gives float32 {want} ({pre.layout})",
                              hint="declare [[model.inputs]] as the factory's layer takes it")
        from .task.parity import steps_of

        steps = [s for s in steps_of(pre.model_dump()) if s["op"] in ("channel_order", "scale", "normalize", "layout")]
        return {"input": spec.name, "index": names.index(spec.name), "shape": list(spec.shape), "size": [h, w],
                "channel_order": pre.channel_order, "scale": pre.scale, "mean": list(pre.mean),
                "std": list(pre.std), "layout": pre.layout, "steps": steps}

    def _convert(self, which: str, spec, arr: np.ndarray, labelled: bool) -> np.ndarray:
        """Data whose dtype is not the input's: a folded input's float data kept (fold_data), else
        a ConfigError whose advice fits the values seen."""
        from .fold_data import dtype_hint, folded_input

        fold = self.fold if self.inference is None else None
        if fold is not None and spec.name == fold["input"]:
            from .task.parity import steps_of

            pre = self.spec.preprocess
            return folded_input(arr, fold, which, labelled, self.path(pre.images), steps_of(pre.model_dump()))
        raise ConfigError(f"{which} data '{spec.name}' has dtype {arr.dtype}, the model input wants {spec.dtype}",
                          hint=dtype_hint(arr, spec.dtype))

    def path(self, rel: str) -> Path:
        p = Path(rel).expanduser()
        return p if p.is_absolute() else self.root / p

    def task(self, labels: dict | None = None):
        """The task (``edgeforge.task.evaluate.Task``): ``[task]``, or without one classification
        when there are 1-D labels and generic otherwise."""
        from .task.evaluate import Task

        sec = self.spec.task
        k = self.spec.data.label_output
        if sec is None:
            one_d = labels is not None and getattr(labels.get("labels"), "ndim", 0) == 1
            return Task(kind="classification" if one_d else "generic", output=k)
        return Task(kind=sec.kind, output=k, blank=sec.blank, time_axis=sec.time_axis, top_k=sec.top_k,
                    score_threshold=sec.score_threshold)

    @property
    def weights(self) -> Path | None:
        return self.path(self.spec.model.weights) if self.spec.model.weights else None

    def source_files(self) -> list[Path]:
        """Files whose contents define the model: the toml, python sources and the weights."""
        files = [self.root / PROJECT_FILE]
        files += sorted(p for p in self.root.rglob("*.py") if "__pycache__" not in p.parts)
        if self.weights is not None:
            files.append(self.weights)
        if self.inference is not None:
            from .inference import program_files

            files += program_files(self.inference)
        return files

    def load_data(self, which: Literal["calibration", "evaluation"]) -> dict[str, np.ndarray]:
        """Load a data set and check it against the input specs. Returns {name: array, [labels]}."""
        rel = getattr(self.spec.data, which)
        path = self.path(rel)
        if not path.is_file():
            raise ConfigError(
                f"{which} data not found: {path}",
                hint=f"create it (one array per input name, first axis = samples) or fix [data].{which} in {PROJECT_FILE}",
            )
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
        except Exception as exc:  # noqa: BLE001 - any unreadable file is a config error
            raise ConfigError(f"{which} data {path} is not a readable .npz of arrays: {exc}") from None
        count = None
        for spec in self.inputs:
            if spec.name not in arrays:
                raise ConfigError(
                    f"{which} data {path.name} has no array '{spec.name}' (has: {', '.join(sorted(arrays)) or 'nothing'})",
                    hint="save one array per model input, named as in [[model.inputs]]",
                )
            arr = arrays[spec.name]
            if str(arr.dtype) != spec.dtype:
                arr = arrays[spec.name] = self._convert(which, spec, arr, labelled=len(arrays) > len(self.inputs))
            want = spec.shape
            if arr.ndim != len(want) or any(w != -1 and w != a for w, a in zip(want[1:], arr.shape[1:])):
                raise ConfigError(
                    f"{which} data '{spec.name}' has shape {list(arr.shape)}, the model input wants "
                    f"{want} (first axis = samples)",
                )
            for i in spec.free_dims:
                if not spec.min_shape[i] <= arr.shape[i] <= spec.max_shape[i]:
                    raise ConfigError(
                        f"{which} data '{spec.name}' has shape {list(arr.shape)}: dim {i} is {arr.shape[i]}, "
                        f"outside its declared range {spec.min_shape[i]}..{spec.max_shape[i]}",
                        hint="crop or pad the arrays into the range, or widen min_shape/max_shape")
            if arr.shape[0] == 0:
                raise ConfigError(f"{which} data '{spec.name}' holds no samples")
            if count is not None and arr.shape[0] != count:
                raise ConfigError(f"{which} data arrays disagree on the number of samples")
            count = arr.shape[0]
        from .task.labels import check_labels

        kind = self.spec.task.kind if self.spec.task is not None else "classification"
        try:
            labels = check_labels(kind, arrays, count)
        except ValueError as exc:
            raise ConfigError(f"{which} data {path.name}: {exc}") from None
        return {**{k: v for k, v in arrays.items() if k in {s.name for s in self.inputs}}, **labels}


_READ: dict[tuple, list[dict]] = {}        # (files, mtimes, sizes) -> the program's inputs


def _program_inputs(project: Project) -> list[dict]:
    import tempfile

    from .inference import agree, program_files, run_read

    files = program_files(project.inference)
    key = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    if key not in _READ:
        with tempfile.TemporaryDirectory(prefix="edgeforge-read-") as tmp:
            _READ[key] = run_read(project.inference, Path(tmp) / "read.log", pass_name="project")["inputs"]
    declared = [s.model_dump() for s in project.spec.model.inputs]
    return agree(_READ[key], declared, str(project.root / PROJECT_FILE))


def find_project(start: str | Path | None = None) -> Path:
    """The project directory for a verb given none: ``start`` (default: the current directory)
    or the nearest parent holding an edgeforge.toml, as git and cargo find theirs."""
    here = Path(start if start is not None else Path.cwd()).expanduser().resolve()
    for d in (here, *here.parents):
        if (d / PROJECT_FILE).is_file():
            return d
    raise ConfigError(f"no {PROJECT_FILE} in {here} or any directory above it",
                      hint="run it in a project directory, pass the project's directory, "
                           "or write one with `edgeforge init`")


def load_project(path: str | Path) -> Project:
    root = Path(path).expanduser()
    if root.is_file() and root.name == PROJECT_FILE:
        root = root.parent
    toml = root / PROJECT_FILE
    if not root.is_dir():
        raise ConfigError(f"project directory not found: {root}")
    if not toml.is_file():
        raise ConfigError(f"{root} is not an edgeforge project: no {PROJECT_FILE} in it")
    spec = parse_model(ProjectSpec, read_toml(toml, "project file"), str(toml))
    names = [i.name for i in spec.model.inputs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{toml}: input names must be unique")
    project = Project(root.resolve(), spec)
    _ = project.fold        # a fold = true that cannot work: one line, now
    if project.inference is not None:
        from .inference import program_files

        program_files(project.inference)        # a missing or PIR program: one line, now
    return project
