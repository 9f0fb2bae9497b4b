#!/usr/bin/env python3
"""What edgeforge costs on a model, in one run on this host (issue 47): per model, the INT8 build's
time with plain PTQ (no float-layer search) and with the bounded budget search, the upload bytes
of a first and a second bench, the bench's wall time, and the INT8 verdicts of the build (host,
interleaved rounds) and of the bench (the loopback device: a real sshd on 127.0.0.1), with the
host's CPU flags beside them.

Models: the digits example, always; Paddle's suite models (PP-LCNet, PP-HGNetV2, PP-LiteSeg,
PicoDet-S) when tests/zoo/suite_models.py is in this tree and its packages are installed
(``make suite-models``); the first lines say which, and why not.

    .venv/bin/python benchmarks/cost.py [--models digits,pp_lcnet,...] [--runs 100] [--json out.json]

Builds use a fresh cache (``--no-cache``): build times are cold. Needs /usr/sbin/sshd.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["FLAGS_enable_pir_api"] = "0"
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SUITE_LOADER = REPO / "tests" / "zoo" / "suite_models.py"


def suite_loader():
    """(module, None) or (None, why the suite models are not in this run)."""
    if not SUITE_LOADER.is_file():
        return None, f"no {SUITE_LOADER.relative_to(REPO)} in this tree: digits only"
    spec = importlib.util.spec_from_file_location("suite_models", SUITE_LOADER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if mod.require() is None:
        return None, f"suite packages missing in {mod.PACKAGES} (run `make suite-models`): digits only"
    return mod, None


def projects(names: list[str], work: Path, train_scale: float = 1.0) -> tuple[dict[str, Path], list[str]]:
    notes, out = [], {}
    if "digits" in names:
        digits = REPO / "examples" / "digits"
        if (digits / "digits.pdparams").is_file():
            out["digits"] = digits
        else:
            notes.append("examples/digits is not trained (make demo): skipped")
    wanted = [n for n in names if n != "digits"]
    if wanted:
        mod, why = suite_loader()
        if mod is None:
            notes.append(why)
        for n in wanted if mod is not None else []:
            if train_scale != 1.0:          # fewer training steps: a quicker, less accurate model
                steps, batch, lr = mod.RECIPE[n]
                mod.RECIPE[n] = (max(1, round(steps * train_scale)), batch, lr)
            print(f"{n}: training briefly and exporting (the suite loader) ...", flush=True)
            root, facts = mod.suite_project(work / n, n, "legacy")
            print(f"  trained in {facts.get('seconds', 0):.0f} s, float {facts.get('accuracy_kind')} "
                  f"{facts.get('float_accuracy')}, {facts.get('export')}", flush=True)
            if facts.get("export_error"):
                notes.append(f"{n}: export failed: {facts['export_error'][:60]}")
                continue
            out[n] = root
    return out, notes


def timed_build(project: Path, out: Path, **opts) -> tuple[float, dict]:
    from edgeforge import api

    t0 = time.perf_counter()
    r = api.build(project, "linux-x86", out=out, no_cache=True, **opts)
    return time.perf_counter() - t0, r.manifest


def bench_twice(sshd, work: Path, build_dir: Path, runs: int) -> list[dict]:
    from edgeforge.device.measure.pick import bench
    from edgeforge.options import BenchOptions

    inv = sshd.write_inventory(work / "devices.toml")
    out = []
    for _ in range(2):
        t0 = time.perf_counter()
        o = bench(build_dir, "local", BenchOptions.of(inventory=str(inv), results_dir=str(work / "results"), runs=runs))
        out.append(dict(o.result, wall_s=time.perf_counter() - t0))
    return out


def measure(name: str, project: Path, sshd, work: Path, runs: int) -> dict:
    from edgeforge.cli._render import host_verdict
    from edgeforge.report.verdict import result_verdict

    plain_s, _ = timed_build(project, work / f"{name}-plain", precision="int8", float_fallback=False)
    search_s, m = timed_build(project, work / f"{name}-int8", precision="int8")
    _, fp32 = timed_build(project, work / f"{name}-fp32", precision="fp32")
    sib = m.get("float_artifact") or {}
    b32 = bench_twice(sshd, work, work / f"{name}-fp32", runs)
    b8 = bench_twice(sshd, work, work / f"{name}-int8", runs)
    hv = host_verdict(m)
    dv, why = result_verdict(b8[0], [b32[0]])
    ab = m.get("accuracy_budget") or {}
    ref = m["reference"]
    return {"model": name, "build_plain_s": plain_s, "build_search_s": search_s,
            "search": {k: ab.get(k) for k in ("seconds", "max_seconds", "stopped", "met")}
            | {"attempts": len(ab.get("attempts") or []), "tried": search_tried(ab)},
            "artifact_bytes": m["artifact"]["size_bytes"],
            # the INT8 build's fp32 sibling (bench times both interleaved): linked on the device when
            # it is the fp32 build's artifact byte for byte, else uploaded with the INT8 artifact
            "sibling_bytes": sib.get("size_bytes"), "sibling_is_fp32_artifact": sib.get("sha256") == fp32["artifact"]["sha256"],
            "routes": {"int8": (m.get("export") or {}).get("route"), "fp32": (fp32.get("export") or {}).get("route")},
            "verdict_bench_source": "interleaved" if b8[0].get("int8_vs_fp32") else "separate runs",
            "reference": {k: ref.get(k) for k in (
                "samples", "evaluation_samples", "bytes", "raw_bytes", "confidence")},
            "upload_first_bytes": b8[0]["transfer"]["uploaded_bytes"],
            "upload_second_bytes": b8[1]["transfer"]["uploaded_bytes"],
            "upload_fp32_first_bytes": b32[0]["transfer"]["uploaded_bytes"],
            "bench_wall_s": b8[0]["wall_s"], "bench_fp32_wall_s": b32[0]["wall_s"],
            "verdict_build": hv.line if hv else "none (the host did not time it)",
            "verdict_bench": dv.line if dv else why,
            "speed_build": hv.speed if hv else None, "speed_bench": dv.speed if dv else None}


def search_tried(ab: dict) -> str:
    """What the budget search tried, in one line: 'plain INT8 met (1 attempt)' or
    '5 attempts (float layers 0, 3, 6, ...), 2 screened on a subset, stopped at max_seconds'."""
    att = ab.get("attempts") or []
    if not att:
        return "no search (plain INT8 only)"
    kept = ", ".join(str(a.get("kept")) for a in att[:8]) + (", ..." if len(att) > 8 else "")
    screened = sum(1 for a in att if a.get("screened"))
    return (f"{len(att)} attempt(s) in {ab.get('seconds')} s of max_seconds {ab.get('max_seconds')} "
            f"(float layers {kept})" + (f", {screened} screened on a subset" if screened else "")
            + (f", stopped at {ab['stopped']}" if ab.get("stopped") else "")
            + (", met" if ab.get("met") else ", budget not met"))


def mb(n) -> str:
    return f"{n / 1e6:.2f}" if n is not None else "-"


def table(rows: list[dict]) -> str:
    """Uploads: the fp32 bench first (artifact, reference, runner), then the INT8 bench twice (the
    reference and the runner are linked on the device by sha256: its artifact only, then 0)."""
    head = ("| model | build plain s | build search s | fp32 1st MB | INT8 1st MB | INT8 2nd MB | bench s | "
            "build | bench |")
    lines = [head, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['build_plain_s']:.1f} | {r['build_search_s']:.1f} | "
                     f"{mb(r['upload_fp32_first_bytes'])} | {mb(r['upload_first_bytes'])} | "
                     f"{mb(r['upload_second_bytes'])} | {r['bench_wall_s']:.1f} | {r['speed_build']} | "
                     f"{r['speed_bench']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="digits,pp_lcnet,pp_hgnetv2,pp_liteseg,picodet_s")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--train-scale", type=float, default=1.0,
                    help="suite models: this share of the loader's training steps (a quicker, less accurate model)")
    args = ap.parse_args(argv)
    if not 1 <= args.runs <= 10000:
        print("error: --runs must be 1 to 10000", file=sys.stderr)
        return 2
    import onnxruntime

    from edgeforge.device.provision.localsshd import LocalSshd
    from edgeforge.runner.device_facts import cpu_flags, int8_cpu_flags

    onnxruntime.set_default_logger_severity(3)         # its graph-cleaning warnings are not ours

    flags = int8_cpu_flags(cpu_flags())
    print(f"host CPU INT8 flags: {', '.join(flags) or 'none'}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgeforge-cost-") as tmp:
        work = Path(tmp)
        found, notes = projects(args.models.split(","), work, args.train_scale)
        for n in notes:
            print(f"note: {n}")
        sshd = LocalSshd(work / "sshd").start()
        try:
            for name, project in found.items():
                print(f"{name}: building and benching ...", flush=True)
                try:
                    rows.append(measure(name, project, sshd, work, args.runs))
                except Exception as exc:        # noqa: BLE001 - one model's failure is a row, not the run
                    notes.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
                    print(f"  failed: {notes[-1]}", flush=True)
                    continue
                r = rows[-1]
                print(f"  reference: {r['reference']['confidence']}")
                print(f"  search: {r['search']['tried']}")
                print(f"  build s: plain {r['build_plain_s']:.1f}, search {r['build_search_s']:.1f}; "
                      f"bench s: fp32 {r['bench_fp32_wall_s']:.1f}, int8 {r['bench_wall_s']:.1f}")
                print(f"  build: {r['verdict_build']}")
                print(f"  bench: {r['verdict_bench']}", flush=True)
                if args.json:
                    args.json.write_text(json.dumps({"host_int8_flags": flags, "rows": rows, "notes": notes},
                                                    indent=1) + "\n")
        finally:
            sshd.stop()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"host_int8_flags": flags, "rows": rows, "notes": notes}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
