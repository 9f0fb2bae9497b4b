"""What the runner's load mode costs: one worker of the runner's ``load`` against a bare
loop of ``session.run`` on the same artifact, the same session options and the same input.

Both sides get a fresh session per round (as the load mode does per level), the same warm-up,
then ``--duration`` seconds of back-to-back runs; the rounds alternate (bare, load, load, bare,
...) so that drift on a shared host falls on both. The figure is the ratio of the medians of
the throughputs, and, robust to a shared host's preemption stalls, of the median time per
request (start to next start, recorded alike on both sides). The load mode's side is :func:`load_level` itself: a worker thread, the
bookkeeping per request, the RSS sampler and the /proc/stat reads.

    .venv/bin/python benchmarks/load_overhead.py [BUILD_DIR] [--rounds 8] [--duration 2]
                                                 [--batch 1,4]

Without BUILD_DIR, the digits example is built for linux-x86 (ONNX INT8) under a temporary
directory (the build cache makes a second run quick).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgeforge.runner.device_facts import cpu_flags, fingerprint, int8_cpu_flags
from edgeforge.runner.load import _load_call, _load_feeds, load_level
from edgeforge.runner.reference import load_reference

GOAL = 0.03          # the load mode may cost at most 3 % of the bare loop's throughput


def digits_build(work: Path) -> Path:
    import shutil
    import subprocess

    from edgeforge import api

    root = work / "digits"
    if not root.exists():
        shutil.copytree(Path(__file__).resolve().parents[1] / "examples" / "digits", root,
                        ignore=shutil.ignore_patterns("__pycache__"))
    if not (root / "digits.pdparams").is_file():
        subprocess.run([sys.executable, str(root / "train.py"), "--out", str(root)], check=True,
                       capture_output=True)
    return api.build(root, "linux-x86", out=work / "digits-linux-x86").out_dir


class Recorder:
    """Wraps the runner's session factory so that every run's start time is recorded, on both
    sides alike. The median gap between consecutive starts is the time one request takes with
    the loop around it: robust to the preemption stalls of a shared host, which the wall-clock
    throughput is not."""

    def __init__(self):
        self.starts: list[float] = []
        self.make = _load_call

    def __call__(self, *args):
        call, rec, clock = self.make(*args), self.starts.append, time.perf_counter

        def timed():
            rec(clock())
            call()
        return timed

    def take(self) -> float:
        gaps = [b - a for a, b in zip(self.starts, self.starts[1:])]
        self.starts = []
        return statistics.median(gaps)


def bare(build_dir: str, spec: dict, feeds: dict, warmup_s: float, duration_s: float,
         threads) -> float:
    """Inferences/s of ``session.run`` in a plain loop (a fresh session, default spinning)."""
    call = _load_call(spec, build_dir, threads, True, feeds)
    end = time.perf_counter() + warmup_s
    while time.perf_counter() < end:
        call()
    n, t0 = 0, time.perf_counter()
    end = t0 + duration_s
    while time.perf_counter() < end:
        call()
        n += 1
    return n / (time.perf_counter() - t0)


def measure(build_dir: str, batch: int, rounds: int, duration_s: float) -> dict:
    manifest = json.loads((Path(build_dir) / "manifest.json").read_text())
    spec = {**manifest, "runtime": manifest.get("runtime") or {}}
    threads = spec["runtime"].get("threads")
    feeds = load_reference(build_dir, spec)[0]
    level = {"mode": "closed", "sessions": "shared", "threads": threads, "batch": batch,
             "concurrency": 1, "rate": None}
    warmup_s = 0.5
    got = {"bare": [], "load": []}
    gaps = {"bare": [], "load": []}
    rec = Recorder()
    _load_call = rec
    try:
        for i in range(rounds):
            for side in (("bare", "load") if i % 2 == 0 else ("load", "bare")):
                if side == "bare":
                    got[side].append(bare(build_dir, spec, _load_feeds(feeds, batch), warmup_s,
                                          duration_s, threads))
                else:
                    lv = load_level(spec, build_dir, level, feeds, warmup_s, duration_s)
                    got[side].append(lv["inferences_per_s"])
                gaps[side].append(rec.take())
    finally:
        _load_call = rec.make
    b, l = statistics.median(got["bare"]), statistics.median(got["load"])
    gb, gl = statistics.median(gaps["bare"]), statistics.median(gaps["load"])
    spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in got.items()}
    return {"batch": batch, "threads": threads, "bare": b, "load": l, "ratio": l / b, "spread": spread,
            "gap_bare_us": gb * 1e6, "gap_load_us": gl * 1e6, "cost": gl / gb - 1}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build_dir", nargs="?", help="an ONNX build (default: digits, built here)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per round and side")
    ap.add_argument("--batch", default="1,4")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="edgeforge-load-overhead-") as tmp:
        build = Path(args.build_dir) if args.build_dir else digits_build(Path(tmp))
        manifest = json.loads((build / "manifest.json").read_text())
        if manifest["backend"] != "onnx":
            raise SystemExit("load_overhead measures an ONNX build (session.run)")
        rows = [measure(str(build), int(b), args.rounds, args.duration) for b in args.batch.split(",")]
    import onnxruntime

    fp = fingerprint()
    print(f"host: {fp['cpu_model']}, {fp['cores']} cores, flags "
          f"{' '.join(int8_cpu_flags(cpu_flags())) or '-'}")
    print(f"model: {manifest.get('name')} {manifest['precision']} ({build.name}), onnxruntime "
          f"{onnxruntime.__version__}, {args.rounds} rounds x {args.duration:g} s per side")
    print()
    print("| batch | threads | bare inf/s | load inf/s | load/bare | bare us | load us | cost |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['batch']} | {r['threads']} | {r['bare']:.0f} | {r['load']:.0f} | {r['ratio']:.3f} | "
              f"{r['gap_bare_us']:.1f} | {r['gap_load_us']:.1f} | {r['cost'] * 100:+.1f} % |")
    print()
    print("inf/s: wall-clock throughput, median of the rounds; us: median time per request,")
    print("start to next start (robust to preemption); cost: load us / bare us - 1")
    for r in rows:
        print(f"batch {r['batch']}: rounds' throughput spread (max-min)/median: bare "
              f"{r['spread']['bare'] * 100:.1f} %, load {r['spread']['load'] * 100:.1f} %")
    worst = max(r["cost"] for r in rows)
    print(f"worst cost {worst * 100:.1f} % (goal <= {GOAL * 100:.0f} %): "
          + ("within the goal" if worst <= GOAL else "OVER the goal"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
