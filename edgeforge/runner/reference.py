"""A build's reference data (the evaluation inputs, the float outputs, the labels) loaded from
its ``.npz`` files in the input order the model expects."""
from __future__ import annotations

import os

try:
    import numpy as np
except ImportError:  # probe still reports the device; bench says numpy is missing
    np = None

from .onnx_proto import onnx_input_names
from .protocol import BuildFault


def load_npz(build_dir, rel):
    try:
        with np.load(os.path.join(build_dir, rel), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as exc:  # OSError, ValueError, zipfile.BadZipFile...: the file is the build's
        raise BuildFault("reference file %s does not load: %s: %s" % (rel, type(exc).__name__, exc)) from exc


def load_reference(build_dir, manifest):
    """The reference inputs (by input name), float outputs and labels of a build. Raises
    BuildFault when they do not fit the manifest (or, for ONNX, the model's input names)."""
    try:
        ref = manifest["reference"]
        names = [i["name"] for i in manifest["inputs"]]
        ins, outs_rel = ref["inputs"], ref["outputs"]
    except (KeyError, TypeError) as exc:
        raise BuildFault("the manifest lacks %s" % exc) from exc
    data = load_npz(build_dir, ins)
    labels = data.pop("labels", None)
    missing = [n for n in names if n not in data]
    if missing:
        raise BuildFault("the reference inputs (%s) have no array for input(s) %s; they hold %s"
                         % (ins, ", ".join(missing), ", ".join(sorted(data)) or "none"))
    for spec in manifest["inputs"]:
        arr, want = data[spec["name"]], spec.get("shape") or []
        if spec.get("dtype") and str(arr.dtype) != spec["dtype"]:
            raise BuildFault("input %s is %s in %s, the manifest says %s" % (spec["name"], arr.dtype, ins, spec["dtype"]))
        if len(want) != arr.ndim or any(isinstance(w, int) and w > 0 and w != a for w, a in zip(want, arr.shape)):
            raise BuildFault("input %s has shape %s in %s, the manifest says %s" % (spec["name"], list(arr.shape), ins, want))
    out_data = load_npz(build_dir, outs_rel)
    keys = ["output_%d" % i for i in range(len(out_data))]
    if not keys or sorted(keys) != sorted(out_data):
        raise BuildFault("the reference outputs (%s) must be output_0, output_1, ...; they hold %s"
                         % (outs_rel, ", ".join(sorted(out_data)) or "none"))
    art = (manifest.get("artifact") or {}).get("path")
    if manifest.get("backend") == "onnx" and art:
        model = onnx_input_names(os.path.join(build_dir, art))
        if model is not None and sorted(model) != sorted(names):
            raise BuildFault("the manifest's inputs (%s) are not the model's (%s)"
                             % (", ".join(names), ", ".join(model) or "none"))
    return {k: data[k] for k in names}, [out_data[k] for k in keys], labels
