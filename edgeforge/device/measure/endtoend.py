"""bench --end-to-end: what the host sends for it (the build's raw images, its pipeline.json
pre- and post-processing) and how the runner's ``end_to_end`` event becomes the result's
``end_to_end`` section (:class:`edgeforge.results.schema.EndToEnd`).

The runner (``end_to_end`` in edgeforge/runner/end_to_end.py) times each image through decode (OpenCV
where the device has it, else Pillow), pre-processing (``run_pipeline``, the code verify
checked), inference at batch 1 and post-processing (``postprocess``).
"""
from __future__ import annotations

import json
from pathlib import Path

from ...errors import ConfigError
from ...runner.limits import E2E_MAX_IMAGES, E2E_MAX_RUNS
from .pipelinecheck import check_images, check_pipeline

NEEDS = "build a project with [preprocess] (its images travel with the build)"


def pipeline_of(build_dir: Path) -> dict:
    path = Path(build_dir) / "pipeline.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ConfigError(f"bench --end-to-end: {build_dir} has no readable pipeline.json", hint=NEEDS) from None
    if not isinstance(doc, dict) or not doc.get("preprocess"):
        raise ConfigError(f"bench --end-to-end: {path} declares no pre-processing", hint=NEEDS)
    check_pipeline(path, doc)           # what the runner cannot use fails here, not on the device
    return doc


def e2e_files(build_dir: Path, manifest: dict) -> dict[str, Path]:
    """The raw images the build carries (``reference.images``), by their path in the build."""
    rels = list((manifest.get("reference") or {}).get("images") or [])[:E2E_MAX_IMAGES]
    if not rels:
        raise ConfigError(f"bench --end-to-end: {build_dir} carries no raw images", hint=NEEDS)
    files = {rel: Path(build_dir) / rel for rel in rels}
    missing = [rel for rel, p in files.items() if not p.is_file()]
    if missing:
        raise ConfigError(f"bench --end-to-end: {build_dir}: {missing[0]} is missing",
                          hint="rebuild with `edgeforge build`")
    check_images(files, pipeline_of(build_dir)["preprocess"], Path(build_dir))
    return files


def e2e_spec(build_dir: Path, manifest: dict, runs: int) -> dict:
    """The runner spec's ``end_to_end`` entry: images, pre-processing steps, input, post-processing
    and how many images are timed (``runs``, at most E2E_MAX_RUNS)."""
    doc = pipeline_of(build_dir)
    return {"images": sorted(e2e_files(build_dir, manifest)), "steps": doc["preprocess"],
            "input": (doc.get("input") or {}).get("name") or manifest["inputs"][0]["name"],
            "postprocess": {k: v for k, v in (doc.get("postprocess") or {}).items()
                            if k not in ("kind", "top_k")},
            "runs": max(1, min(int(runs), E2E_MAX_RUNS))}


def e2e_result(event: dict | None) -> dict | None:
    """The result's ``end_to_end`` section from the runner's event (None: not measured)."""
    if not event:
        return None
    return {k: v for k, v in event.items() if k != "event"}


def dominant(e2e: dict) -> str:
    """One line: how the end-to-end time splits, and whether pre/post-processing dominates."""
    sh = e2e.get("shares") or {}
    parts = ", ".join(f"{st} {sh[st] * 100:.0f}%" for st in ("decode", "preprocess", "infer", "postprocess")
                      if sh.get(st) is not None)
    tax = e2e.get("ai_tax")
    if tax is None:
        return f"end to end: {parts}"
    if tax > 0.5:
        return (f"pre/post-processing dominates: {tax * 100:.0f}% of the end-to-end time is outside the "
                f"model ({parts})")
    return f"the model dominates: {(1 - tax) * 100:.0f}% of the end-to-end time is inference ({parts})"


def summary_line(e2e: dict) -> str:
    """p50/p99 per stage and of the whole, and the share outside the model, on one line."""
    st = e2e.get("stages") or {}
    parts = [f"{name} {(st.get(name) or {}).get('p50_ms') or 0:.3g}/{(st.get(name) or {}).get('p99_ms') or 0:.3g}"
             for name in ("decode", "preprocess", "infer", "postprocess")]
    tot, tax = e2e.get("total") or {}, e2e.get("ai_tax")
    return (f"p50/p99 ms: {', '.join(parts)}; total {tot.get('p50_ms') or 0:.3g}/{tot.get('p99_ms') or 0:.3g}"
            + ("" if tax is None else f"; {tax * 100:.0f}% outside the model")
            + f" ({e2e.get('runs')} runs over {e2e.get('images')} images, {e2e.get('decoder')} decode)")
