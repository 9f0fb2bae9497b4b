"""``drift.task`` of a bench result: the task record computed on the host from the evaluation
outputs the device's runner sent back (compressed), with the build's reference outputs and
labels, as verify computed ``verify.task`` on the host."""
from __future__ import annotations

import base64
import io
from pathlib import Path

import numpy as np

from ..errors import ConfigError, PassError
from .evaluate import LABEL_KEYS, Task, evaluate


def wants_outputs(manifest: dict) -> bool:
    """Whether the task needs the device's evaluation outputs (a ``[task]`` was verified)."""
    return bool(((manifest.get("verify") or {}).get("task") or {}).get("settings"))


def reduce_spec(manifest: dict) -> dict | None:
    """What the runner may reduce its outputs to before it sends them back: a segmenter's class
    map (``argmax``) instead of its scores, where the task metric reads nothing else (no
    ``[task] metric`` of the user's, which gets the raw outputs)."""
    st = ((manifest.get("verify") or {}).get("task") or {}).get("settings") or {}
    if st.get("kind") != "segmentation" or st.get("metric") or st.get("postprocess"):
        return None
    return {"op": "argmax", "output": int(st.get("output") or 0)}


def _first(arrays: list | dict, n: int | None):
    """The first ``n`` samples (the runner sent only those, to bound what it sends)."""
    if n is None:
        return arrays
    if isinstance(arrays, dict):
        if "gt_counts" in arrays:
            rows = int(np.sum(arrays["gt_counts"][:n]))
            return {k: (v[:n] if k == "gt_counts" else v[:rows]) for k, v in arrays.items()}
        return {k: v[:n] for k, v in arrays.items()}
    return [a[:n] for a in arrays]


def _npz(data: bytes) -> dict:
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _outputs(d: dict) -> list:
    return [d[f"output_{i}"] for i in range(len(d))]


def drift_task(build_dir: Path, manifest: dict, event: dict | None, log: Path | None = None) -> dict | None:
    """The task record of the device's outputs (``event``: the runner's ``outputs`` event),
    or a record with ``skipped`` saying why there is none."""
    verified = (manifest.get("verify") or {}).get("task") or {}
    st = dict(verified.get("settings") or {})
    if not st:
        return None
    empty = {"kind": verified.get("kind"), "metric": verified.get("metric"), "float": None, "artifact": None,
             "drop": None}
    if not event or not event.get("npz"):
        return {**empty, "skipped": (event or {}).get("skipped") or "the runner sent no evaluation outputs"}
    post = st.pop("postprocess", None)
    in_graph = st.pop("float_nms_in_graph", False)    # the float program has the NMS the device ran
    try:
        sent = _npz(base64.b64decode(event["npz"]))
        ref = manifest["reference"]
        reference = _outputs(_npz((Path(build_dir) / ref["outputs"]).read_bytes()))
        inputs = _npz((Path(build_dir) / ref["inputs"]).read_bytes())
        how: dict = {}
        if post is not None and event.get("answers"):
            # the device's answers against the float outputs through the same post-processing
            from .post import answer_figures, answers_of, nms_rows

            ref_answers = nms_rows(reference) if in_graph else answers_of(reference, post)
            outs, reference, how = sent, ref_answers, {"figures_of": answer_figures}
        elif post is not None:
            return {**empty, "skipped": "the runner sent outputs, not the [postprocess] answers (an older runner)"}
        else:
            outs = _outputs(sent)
            reference = _first(reference, event.get("samples"))
            inputs = _first(inputs, event.get("samples"))
            red = event.get("reduced") or {}
            if red.get("op") == "argmax" and not st.get("classes"):      # the class map's classes
                st["classes"] = int(np.asarray(reference[int(red.get("output", 0))]).shape[1])
    except (OSError, ValueError, KeyError, IndexError) as exc:
        return {**empty, "skipped": f"the evaluation outputs do not load: {exc}"}
    labels = {k: v for k, v in inputs.items() if k in LABEL_KEYS}
    spec, project = st.pop("metric", None), st.pop("project", None)
    task = Task(**{k: v for k, v in st.items() if k in Task.__dataclass_fields__})
    user = None
    if spec:
        if not project or not Path(project).is_dir():
            return {**empty, "skipped": f"the task metric {spec} needs its project ({project}), not here"}
        from .user import user_metric

        user = user_metric(Path(project), spec, log or Path(build_dir) / "bench-metric.log", pass_name="bench")
    try:
        rec = evaluate(task, outs, reference, labels, user, spec or "", **how)
        if how:
            rec["postprocess"] = post["op"]      # the device's answers were compared
        if event.get("samples") is not None:
            rec["samples"] = int(event["samples"])
        return rec
    except (ValueError, PassError, ConfigError) as exc:
        return {**empty, "skipped": exc.one_line() if isinstance(exc, ConfigError) else str(exc)}
