"""The one check of a build directory before a device verb uses it (bench, fleet bench, load,
run/sweep through Bench, the deploy verbs): nothing from a build directory reaches a device
unchecked.

A build directory is input like any other (CI downloads one from another job; anyone can edit
its ``manifest.json``). :class:`edgeforge.manifest.Manifest` is the one model of the document:
``build_manifest`` writes through it and this check reads through it: input names against a strict pattern, dtypes against the
set edgeforge builds, shapes as short lists of positive dimensions or -1/None, runtime numbers
in range. :func:`validate_build` adds the file names (relative, plain components, inside the
build directory through symlinks) and the reference data's headers (an ``.npy`` per input, of
the manifest's dtype and shape). A failure is :class:`~edgeforge.errors.BuildInvalid` (exit 2)
naming the field, raised before any connection, and never counted against a device's health.
"""
from __future__ import annotations

import re
import zipfile
from pathlib import Path, PurePosixPath

from pydantic import ValidationError

from ...config import describe
from ...errors import BuildInvalid
from ...manifest import MAX_INPUTS, Manifest

FILE_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
MAX_PATH = 255
PATH_FIELDS = ("artifact.path", "float_artifact.path", "reference.inputs", "reference.outputs")

def _field(manifest: dict, dotted: str):
    value = manifest
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _refuse(where: Path, what: str, hint: str = "not a manifest edgeforge wrote: rebuild it"):
    raise BuildInvalid(f"{where}: {what}", hint=hint)


def validate_build(build_dir: Path, manifest: dict) -> None:
    """``manifest.json`` against :class:`~edgeforge.manifest.Manifest`; every path in it relative, in plain
    components (no ``..``: it also names the file's place under the remote release directory,
    which it must not leave) and, symlinks resolved, inside ``build_dir``; the reference data
    against the inputs. Else BuildInvalid (exit 2) naming the field."""
    where = Path(build_dir) / "manifest.json"
    try:
        Manifest.model_validate(manifest)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
        msg = describe(err).removeprefix("Value error, ")
        _refuse(where, f"field {field}: {msg}",
                hint="not a manifest edgeforge wrote: rebuild with `edgeforge build`")
    names = [i["name"] for i in manifest["inputs"]]
    if len(set(names)) != len(names):
        _refuse(where, f"field inputs: the input names repeat ({', '.join(names)})")
    root = Path(build_dir).resolve()
    images = (manifest.get("reference") or {}).get("images") or []
    for dotted, rel in [(d, _field(manifest, d)) for d in PATH_FIELDS] + [
            (f"reference.images[{i}]", r) for i, r in enumerate(images)]:
        if rel is None:
            continue
        parts = PurePosixPath(rel).parts
        if (not rel or len(rel) > MAX_PATH or "\\" in rel or PurePosixPath(rel).is_absolute()
                or rel.startswith("~") or "\0" in rel or any(p in ("..", ".") for p in parts)):
            _refuse(where, f"field {dotted} = {rel!r} is not a relative path inside the build "
                           "directory")
        if not all(FILE_PART.match(p) for p in parts):
            _refuse(where, f"field {dotted} = {rel!r}: each part of a file name must be letters, "
                           "digits or '_.+-' (at most 128, not starting with '.' or '-')")
        resolved = (root / rel).resolve()
        if resolved != root and root not in resolved.parents:
            _refuse(where, f"field {dotted} = {rel!r} leads outside the build directory "
                           f"(to {resolved}, through a symlink)",
                    hint="a build directory must hold its own files: rebuild it")
    if manifest.get("reference") is not None:
        check_reference(Path(build_dir), manifest)


def _npy_headers(path: Path, rel: str) -> dict[str, tuple[tuple, str]]:
    """{key: (shape, dtype)} of the arrays in an ``.npz``, from their headers only."""
    import numpy as np

    out = {}
    try:
        with zipfile.ZipFile(path) as z:
            members = z.namelist()
            if len(members) > 4 * MAX_INPUTS:
                raise ValueError(f"{len(members)} arrays")
            for member in members:
                if not member.endswith(".npy"):
                    raise ValueError(f"{member!r} is not an array")
                with z.open(member) as fh:
                    version = np.lib.format.read_magic(fh)
                    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                            else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read(fh)
                out[member[:-4]] = (tuple(shape), str(dtype))
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise BuildInvalid(f"{path}: {rel} is not a readable .npz of arrays ({exc})",
                           hint="rebuild with `edgeforge build`") from None
    return out


def check_reference(build_dir: Path, manifest: dict) -> None:
    """The reference data fits the manifest: one array per input (its dtype, its rank, its fixed
    dimensions, one sample count for all), outputs ``output_0`` ... in order. A missing file is
    left to :func:`edgeforge.device.link.settings.build_files` (it names it)."""
    ref = manifest["reference"]
    ins, outs = build_dir / ref["inputs"], build_dir / ref["outputs"]
    if not (ins.is_file() and outs.is_file()):
        return
    arrays = _npy_headers(ins, ref["inputs"])
    counts = set()
    for spec in manifest["inputs"]:
        name = spec["name"]
        if name not in arrays:
            _refuse(ins, f"no array for input '{name}' (it holds {', '.join(sorted(arrays)) or 'none'})",
                    hint="the manifest and its reference data disagree: rebuild it")
        shape, dtype = arrays[name]
        want = [d if isinstance(d, int) and d > 0 else None for d in spec["shape"]]
        if dtype != spec["dtype"] or len(shape) != len(want) or any(
                w is not None and w != s for w, s in zip(want, shape)):
            _refuse(ins, f"input '{name}' is {dtype}{list(shape)}, the manifest says "
                         f"{spec['dtype']}{spec['shape']}",
                    hint="the manifest and its reference data disagree: rebuild it")
        counts.add(shape[0] if shape else None)
    if len(counts) > 1:
        _refuse(ins, f"the inputs hold different sample counts ({sorted(counts, key=str)})")
    keys = sorted(_npy_headers(outs, ref["outputs"]))
    expected = [f"output_{i}" for i in range(len(keys))]
    if not keys or sorted(expected) != keys:
        _refuse(outs, f"outputs must be output_0, output_1, ... (it holds {', '.join(keys) or 'none'})",
                hint="rebuild with `edgeforge build`")
