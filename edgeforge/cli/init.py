"""The ``init`` verb: write a working edgeforge.toml (edgeforge.init does the work); ``export``: a
factory's program as files (edgeforge.export_program)."""
from __future__ import annotations

from ..errors import ExitCode
from ._common import nonneg_int, numbers, points

# [0, 1]-scaled pixels: a mean or std beyond these is a typo, not a normalisation
means = numbers(float, "means", at_least=-1000, at_most=1000, allow_zero=True, as_text=True)
stds = numbers(float, "standard deviations", at_least=1e-6, allow_zero=True, at_most=1000, as_text=True)


def register(sub) -> None:
    p = sub.add_parser("init", help="write an edgeforge.toml for a model (and its data files)")
    p.add_argument("dir", nargs="?", default=".", metavar="DIR",
                   help="the project directory to write (default: the current one; created if missing)")
    p.add_argument("--from-inference", metavar="PREFIX",
                   help="an exported inference model: PREFIX.pdmodel or PREFIX.json (PIR), + PREFIX.pdiparams")
    p.add_argument("--factory", metavar="MODULE:CLASS",
                   help="a factory importable from DIR that returns a paddle.nn.Layer")
    p.add_argument("--weights", metavar="F", help="the factory's trained parameters (.pdparams)")
    p.add_argument("--input", action="append", default=[], metavar="NAME:SHAPE:DTYPE",
                   help="an input, e.g. x:-1,3,224,224:float32 (repeat per input; -1 is free)")
    p.add_argument("--data", metavar="DIR",
                   help="images (PNG/JPEG) or .npy/.npz files, in class sub-folders for labels: "
                        "written as data/calib.npz and data/eval.npz, split 1:2 (sources: data/split.json)")
    p.add_argument("--task", choices=["classification", "detection", "segmentation", "ctc"],
                   help="what the model is for: written as [task] kind; detection, segmentation and ctc "
                        "take their labels from --labels")
    p.add_argument("--labels", metavar="PATH",
                   help="detection: a COCO instances.json; segmentation: a folder of mask PNGs; "
                        "ctc: a file of path<TAB>text lines (docs/task.md \"init --task\")")
    p.add_argument("--charset", metavar="CHARS",
                   help="ctc: the characters in class order (default: the labels' characters, sorted)")
    p.add_argument("--max-metric-drop", type=points, metavar="POINTS",
                   help="[task] max_metric_drop: the points of the task metric an INT8 build may lose "
                        "(default: the build's accuracy budget)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="the split's seed (default: 0)")
    p.add_argument("--mean", metavar="M[,M,M]", type=means,
                   help="per-channel mean subtracted after scaling to [0,1]")
    p.add_argument("--std", metavar="S[,S,S]", type=stds, help="per-channel std divided by after the mean")
    p.add_argument("--resample", choices=["bilinear", "nearest", "bicubic"], default="bilinear",
                   help="how images are resized to the input (default: bilinear)")
    p.add_argument("--name", help="the project name (default: the directory's name)")
    p.add_argument("--target", default="linux-x86", help="the target of the next-steps command")
    p.set_defaults(func=cmd_init)

    e = sub.add_parser("export", help="write a factory's inference program (legacy .pdmodel for Paddle "
                                      "Lite, or PIR .json) with edgeforge's export")
    e.add_argument("dir", nargs="?", default=".", metavar="DIR",
                   help="the directory the factory is imported from (default: the current one)")
    e.add_argument("--factory", required=True, metavar="MODULE:CLASS",
                   help="a factory importable from DIR that returns a paddle.nn.Layer")
    e.add_argument("--weights", metavar="F", help="its trained parameters (.pdparams)")
    e.add_argument("--input", action="append", default=[], metavar="NAME:SHAPE:DTYPE",
                   help="an input, e.g. x:-1,3,224,224:float32 (default: the forward's InputSpecs)")
    fmt = e.add_mutually_exclusive_group()
    fmt.add_argument("--legacy", dest="fmt", action="store_const", const="legacy",
                     help="the legacy ProgramDesc (inference.pdmodel): Paddle Lite reads only this (default)")
    fmt.add_argument("--pir", dest="fmt", action="store_const", const="pir",
                     help="Paddle 3's PIR program (inference.json), for the ONNX targets")
    e.add_argument("--out", required=True, metavar="OUT",
                   help="a new or empty directory: OUT/inference.pdmodel + OUT/inference.pdiparams")
    e.set_defaults(func=cmd_export, fmt="legacy")


def cmd_init(args) -> int:
    from ..errors import ConfigError
    from ..init import DataSource, ModelSource, init_project

    source = ModelSource(from_inference=args.from_inference, factory=args.factory, weights=args.weights,
                         inputs=args.input)
    data = None
    if args.data is not None:
        data = DataSource(args.data, mean=args.mean, std=args.std, resample=args.resample, labels=args.labels,
                          seed=args.seed, charset=args.charset)
    elif args.mean is not None or args.std is not None:
        raise ConfigError("--mean and --std go with --data (they pre-process its images)")
    elif args.labels is not None or args.charset is not None:
        raise ConfigError("--labels and --charset go with --data (the images they label)")
    if args.charset is not None and args.task != "ctc":
        raise ConfigError("--charset goes with --task ctc (the characters' classes)")
    if args.max_metric_drop is not None and args.task is None:
        raise ConfigError("--max-metric-drop goes with --task (it is the task metric's budget)")
    res = init_project(args.dir, source, data, name=args.name, target=args.target, task=args.task,
                       max_metric_drop=args.max_metric_drop)
    from ..init_toml import one_line

    for path in res.written:
        print(f"wrote {one_line(path)}")
    for s in res.inputs:
        print(f"input {s['name']}: {s['shape']} {s['dtype']}")
    for note in res.notes:
        print(note)
    for m in res.missing:
        print(f"missing: {m}")
    print(f"next: {res.next_step}")
    return ExitCode.OK


def cmd_export(args) -> int:
    from ..export_program import export_program

    res = export_program(args.dir, args.factory, args.out, weights=args.weights, inputs=args.input, fmt=args.fmt)
    for path in res.files:
        print(f"wrote {path}")
    for s in res.inputs:
        print(f"input {s['name']}: {s['shape']} {s['dtype']}")
    used = (res.record.get("legacy_api_patch") or {}).get("used") or {}
    print(f"program: {res.record.get('program')}"
          + (f"; Paddle 3.3 APIs written as legacy ops: {', '.join(sorted(used))}" if used else ""))
    print(f"next: {res.next_step}")
    return ExitCode.OK
