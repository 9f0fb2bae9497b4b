"""``--precision auto``: build every precision the target allows, measure each, keep the fastest
that meets the accuracy budget (:func:`edgeforge.report.verdict.choose`).

- :func:`decide_on_host` (``build --precision auto``): where the host runs the target's runtime
  (:func:`edgeforge.contracts.needs_device`), the candidates are timed interleaved on the host
  (the stand-in, spinning off) and compared with compare's statistics; otherwise the target's
  default precision is built and the decision says that it needs a device.
- :func:`decide_on_device` (``run --precision auto``): each candidate is benched on the device
  (one ordinary result each, tagged ``precision_auto``), compared with fp32 by ``compare``.

Either way the chosen build is (re)built, from the cache, where a plain ``build`` puts it (or
``out``), with ``decision.json`` beside its manifest: the candidates and the choice. Nothing
here prints or exits.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError
from ...options import BenchOptions, BuildOptions

PRECISIONS = ("fp32", "fp16", "int8")
DECISION = "decision.json"
SCHEMA = "edgeforge.decision/1"


@dataclass
class Decision:
    build: object                # api.BuildResult of the chosen precision, where a build puts it
    record: dict                 # what decision.json holds
    result: dict | None = None   # run: the chosen candidate's bench result
    path: Path | None = None     # ... and its file


def allowed(profile, backend: str) -> list[str]:
    """The precisions the target's runtime can run on ``backend`` (resolve_precision's rules)."""
    from ...options import resolve_precision

    out = []
    for p in PRECISIONS:
        try:
            resolve_precision(profile, backend, p)
        except ConfigError:
            continue
        out.append(p)
    return out


def _plan(project, target: str, build: BuildOptions | None, out):
    from ... import api
    from ...options import resolve_backend
    from ...project import load_project
    from ...targets import load_target

    build = build or BuildOptions()
    profile = load_target(target)
    proj = load_project(project)
    backend = resolve_backend(profile, build.backend, proj)[0]     # what each api.build resolves too
    dest = Path(out) if out else api.default_out_dir(proj, profile, backend, profile.precision_for(backend))
    api.check_out_dir(dest)             # build --out's rule, before the candidates are built
    return build, profile, backend, dest


def _build_all(project, target, build: BuildOptions, precisions, work: Path, log) -> dict:
    from ... import api

    builds = {}
    for p in precisions:
        log(f"precision auto: building {p}")
        builds[p] = api.build(project, target, build.model_copy(update={"precision": p}),
                              out=work / p, log=log)
    return builds


def _finish(project, target, build: BuildOptions, dest: Path, record: dict, log) -> object:
    from ... import api
    from ...fsutil import write_json_atomic

    log(f"precision auto: {record['chosen']} into {dest}")
    res = api.build(project, target, build.model_copy(update={"precision": record["chosen"]}), out=dest, log=log)
    write_json_atomic(dest / DECISION, record)
    return res


def decide_on_host(project, target: str, build: BuildOptions | None = None, *, out=None,
                   log=None) -> Decision:
    from ...contracts import needs_device
    from ...quant.speed import NOTE, interleaved, p50
    from ...report.int8_procedure import decide
    from ...report.verdict import choose

    log = log or (lambda m: None)
    build, profile, backend, dest = _plan(project, target, build, out)
    precisions = allowed(profile, backend)
    record = {"schema": SCHEMA, "target": target, "backend": backend, "where": "host",
              "allowed": precisions, "candidates": []}
    no_host = needs_device(profile, backend)
    if no_host or len(precisions) == 1:
        default = profile.precision_for(backend)
        why = "only one precision is allowed" if len(precisions) == 1 else no_host
        record.update(where=None, chosen=default if len(precisions) > 1 else precisions[0],
                      reason=f"{why}; built the target's default")
        return Decision(_finish(project, target, build, dest, record, log), record)
    with tempfile.TemporaryDirectory(prefix="edgeforge-auto-") as work:
        builds = _build_all(project, target, build, precisions, Path(work), log)
        feeds = _feeds(builds["fp32"])
        log(f"precision auto: timing {', '.join(precisions)} on the host ({NOTE})")
        threads = profile.runtime.threads
        samples = interleaved({p: b.out_dir / b.manifest["artifact"]["path"] for p, b in builds.items()},
                              feeds, threads=threads)
    for p, b in builds.items():
        c = None if p == "fp32" else decide(samples["fp32"], samples[p], labels=("fp32", p)).to_dict()
        record["candidates"].append(_candidate(p, b.manifest, p50(samples[p]), c))
    record.update(choose(record["candidates"]), note=f"{NOTE}, {threads} threads")
    record["chosen"] = record.pop("precision")
    return Decision(_finish(project, target, build, dest, record, log), record)


def decide_on_device(project, target: str, device: str, build: BuildOptions | None = None,
                     bench: BenchOptions | None = None, *, out=None, on_step=None) -> Decision:
    from ...fsutil import write_json_atomic
    from ...report.int8_procedure import decide_results
    from ...report.pairing import p50_ms
    from ...report.verdict import choose
    from ..measure.pick import bench as bench_one
    from ..measure.fleet import new_id

    on_step = on_step or (lambda step, msg: None)
    log = lambda msg: on_step("build", msg)  # noqa: E731
    build, profile, backend, dest = _plan(project, target, build, out)
    precisions = allowed(profile, backend)
    run_id = new_id("auto")
    record = {"schema": SCHEMA, "id": run_id, "target": target, "backend": backend, "where": device,
              "allowed": precisions, "candidates": []}
    outcomes = {}
    with tempfile.TemporaryDirectory(prefix="edgeforge-auto-") as work:
        builds = _build_all(project, target, build, precisions, Path(work), log)
        for p, b in builds.items():
            if b.verify_status == "failed":
                continue
            on_step("bench", f"precision auto: {p} on {device}")
            outcomes[p] = bench_one(b.out_dir, device, bench, on_step=on_step,
                                    tags={"precision_auto": {"id": run_id, "candidate": p}})
    if "fp32" not in outcomes:
        raise ConfigError("precision auto: the fp32 build failed verify; nothing to compare with")
    ref = outcomes["fp32"].result
    for p, o in outcomes.items():
        c = None if p == "fp32" else decide_results(ref, o.result, labels=("fp32", p)).to_dict()
        cand = _candidate(p, builds[p].manifest, p50_ms(o.result), c)
        cand.update(result=str(o.path), accuracy_drop=(o.result.get("drift") or {}).get("accuracy_drop"))
        record["candidates"].append(cand)
    for p, b in builds.items():
        if p not in outcomes:
            record["candidates"].append(dict(_candidate(p, b.manifest, None, None), met=False))
    record.update(choose([c for c in record["candidates"] if c["p50_ms"] is not None]))
    record["chosen"] = record.pop("precision")
    res = _finish(project, target, build, dest, record, log)
    chosen = outcomes[record["chosen"]]
    chosen.result["decision"] = record
    write_json_atomic(chosen.path, chosen.result)
    return Decision(res, record, chosen.result, chosen.path)


def _candidate(precision: str, manifest: dict, p50, compare_dict) -> dict:
    v = manifest["verify"]
    return {"precision": precision, "p50_ms": None if p50 is None else round(p50, 4),
            "met": v["status"] != "failed", "verify": v["status"], "accuracy_drop": v.get("accuracy_drop"),
            "cosine": v.get("cosine"), "size_bytes": manifest["artifact"]["size_bytes"],
            "sha256": manifest["artifact"]["sha256"], "compare": compare_dict}


def _feeds(fp32_build) -> dict:
    import numpy as np

    with np.load(fp32_build.out_dir / "reference" / "eval_inputs.npz") as z:
        return {k: z[k] for k in z.files if k != "labels"}
