"""``smoke DIR``: a deployed release loaded with its runtime, its reference inputs run, the
drift judged against the build's own budget (exit 6 over budget)."""
from __future__ import annotations

import json
import os
import sys
import time

try:
    import numpy as np
except ImportError:  # probe still reports the device; bench says numpy is missing
    np = None

from .metrics import drift_metrics, jsonable
from .predictors import make_predictor, predict_per_batch_size
from .protocol import BuildFault, EXIT_DIGEST, EXIT_DRIFT, EXIT_OK, EXIT_RUNTIME_MISSING, RUNNER_VERSION, RuntimeMissing, import_runtime, needed_runtime, note_in_lease, check_files, emit, spec_command
from .reference import load_reference


FLOAT_REL_TOLERANCE = 1e-4      # as the host's verify: a float artifact against Paddle Inference


def smoke_budget(manifest):
    """The drift budget the build was made to: the host's verify rules, the build's own numbers."""
    if manifest.get("precision", "fp32") == "fp32":
        return {"max_rel_error": FLOAT_REL_TOLERANCE}
    ab = manifest.get("accuracy_budget") or {}
    return {"max_accuracy_drop": float(ab.get("budget_points", 1.0) if ab.get("budget_points") is not None else 1.0),
            "min_cosine": float(ab.get("min_cosine") or 0.99)}


def judge_drift(m, budget):
    """(passed, reason): the worst output against ``budget``, as verify judges a build."""
    per = m.get("outputs") or [m]
    if "max_rel_error" in budget:
        worst = max((o.get("rel_max_abs_error") or 0.0) for o in per)
        return worst <= budget["max_rel_error"], "relative error %.2e (budget %.2e)" % (worst, budget["max_rel_error"])
    if m.get("accuracy_drop") is not None and budget.get("max_accuracy_drop") is not None:
        drop = m["accuracy_drop"]
        return drop <= budget["max_accuracy_drop"], "accuracy drop %.2f points (budget %g)" % (
            drop, budget["max_accuracy_drop"])
    worst = min(o.get("cosine", 0.0) for o in per)
    return worst >= budget.get("min_cosine", 0.99), "cosine %.4f (budget >= %g)" % (worst, budget.get("min_cosine", 0.99))


def smoke(release_dir, spec):
    """Load a release with its runtime, run its reference inputs, judge the drift against the
    build's budget (``spec["budget"]`` overrides it). Events: start, files, runtime, smoke, done.
    Exit 0 when the drift is within budget, 6 when it is not."""
    emit("start", pid=os.getpid(), runner_version=RUNNER_VERSION, time=time.time())
    note_in_lease(spec.get("lease"))
    if spec.get("deadline_s") and hasattr(__import__("signal"), "alarm"):
        __import__("signal").alarm(max(1, int(spec["deadline_s"] + 0.999)))
    bad = check_files(release_dir, spec.get("files", {}))
    if bad:
        emit("error", kind="digest", files=bad, message="sha256 mismatch for %s" % ", ".join(bad))
        return EXIT_DIGEST
    emit("files", checked=sorted(spec.get("files", {})))
    try:
        with open(os.path.join(release_dir, "manifest.json")) as fh:
            manifest = json.load(fh)
    except (OSError, ValueError) as exc:
        raise BuildFault("the release's manifest.json does not load: %s" % exc) from exc
    try:
        if np is None:
            raise RuntimeMissing("numpy is not importable by %s" % sys.executable)
        import_runtime(needed_runtime(manifest))
    except RuntimeMissing as exc:
        emit("error", kind="runtime-missing", message=str(exc))
        return EXIT_RUNTIME_MISSING
    threads = (manifest.get("runtime") or {}).get("threads")
    feeds, ref, labels = load_reference(release_dir, manifest)
    made = []
    outs, _ = predict_per_batch_size(lambda: made.append(make_predictor(manifest, release_dir, threads))
                                     or made[-1], feeds)
    emit("runtime", **made[0].runtime)
    m = {k: jsonable(v) for k, v in drift_metrics(outs, ref, labels).items()}
    budget = spec.get("budget") or smoke_budget(manifest)
    passed, reason = judge_drift(m, budget)
    emit("smoke", passed=passed, reason=reason, budget=budget, samples=len(next(iter(feeds.values()))),
         drift={k: v for k, v in m.items() if k != "outputs"}, runtime=made[0].runtime)
    emit("done", time=time.time())
    return EXIT_OK if passed else EXIT_DRIFT


def smoke_main(argv):
    return spec_command("smoke", argv, smoke, default="{}",
                        help="smoke spec as JSON (files, budget, deadline_s, lease)")
