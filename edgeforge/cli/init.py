"""The ``init`` verb: write a working edgeforge.toml (edgeforge.init does the work)."""
from __future__ import annotations

from ..errors import ExitCode


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
                        "written as data/calib.npz and data/eval.npz, split 1:2")
    p.add_argument("--mean", metavar="M[,M,M]", help="per-channel mean subtracted after scaling to [0,1]")
    p.add_argument("--std", metavar="S[,S,S]", help="per-channel std divided by after the mean")
    p.add_argument("--resample", choices=["bilinear", "nearest", "bicubic"], default="bilinear",
                   help="how images are resized to the input (default: bilinear)")
    p.add_argument("--name", help="the project name (default: the directory's name)")
    p.add_argument("--target", default="linux-x86", help="the target of the next-steps command")
    p.set_defaults(func=cmd_init)


def cmd_init(args) -> int:
    from ..init import DataSource, ModelSource, init_project

    source = ModelSource(from_inference=args.from_inference, factory=args.factory, weights=args.weights,
                         inputs=args.input)
    data = None
    if args.data is not None:
        data = DataSource(args.data, mean=args.mean, std=args.std, resample=args.resample)
    elif args.mean is not None or args.std is not None:
        from ..errors import ConfigError

        raise ConfigError("--mean and --std go with --data (they pre-process its images)")
    res = init_project(args.dir, source, data, name=args.name, target=args.target)
    for path in res.written:
        print(f"wrote {path}")
    for s in res.inputs:
        print(f"input {s['name']}: {s['shape']} {s['dtype']}")
    for note in res.notes:
        print(note)
    for m in res.missing:
        print(f"missing: {m}")
    print(f"next: {res.next_step}")
    return ExitCode.OK
