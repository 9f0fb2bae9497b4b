"""The bench result: one versioned JSON file per run, ``edgeforge.bench/1``.

Readers reject an unknown schema. Files are written atomically and never replace an earlier
result: a name that is taken gets a ``-2``, ``-3``, ... suffix.

Top level: schema, status ("ok", or "incomplete" when the run failed part-way and this holds
what was measured before), created_at, edgeforge_version, artifact, build, device (name, host,
target, fingerprint), runtime, settings, samples_ms (raw, in run order), warmup_ms, summary,
drift, transfer, error (status "incomplete" only).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import tempfile
from pathlib import Path

from ..errors import ResultError
from ..fsutil import json_safe

SCHEMA = "edgeforge.bench/1"
STATUSES = ("ok", "incomplete")
REQUIRED = {
    "artifact": ("sha256", "target", "backend", "precision"),
    "device": ("name", "fingerprint"),
    "runtime": ("name", "version"),
    "settings": ("warmups", "runs", "threads"),
    "summary": ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "mad_ms", "peak_rss_mb"),
    "drift": ("top1_agreement", "accuracy", "float_accuracy", "accuracy_drop", "max_abs_error", "cosine"),
    "transfer": ("uploaded_bytes", "seconds"),
}
FINGERPRINT_KEYS = ("cpu_model", "kernel", "governor", "temp_c_before", "temp_c_after", "load_avg")
DRIFT_KEYS = REQUIRED["drift"] + ("mean_abs_error", "rel_max_abs_error")


def empty_drift(reason: str | None = None) -> dict:
    d = {k: None for k in DRIFT_KEYS}
    if reason:
        d["skipped"] = reason
    return d


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def validate(result: dict, source: str = "result") -> dict:
    """Check a result dict against ``edgeforge.bench/1``; raise ResultError naming the problem."""
    if not isinstance(result, dict):
        raise ResultError(f"{source}: not a JSON object")
    if result.get("schema") != SCHEMA:
        raise ResultError(f"{source}: unknown schema {result.get('schema')!r}, this edgeforge reads {SCHEMA}")
    if result.get("status") not in STATUSES:
        raise ResultError(f"{source}: status must be one of {', '.join(STATUSES)}, not {result.get('status')!r}")
    for section, keys in REQUIRED.items():
        part = result.get(section)
        if not isinstance(part, dict):
            raise ResultError(f"{source}: missing section '{section}'")
        for k in keys:
            if k not in part:
                raise ResultError(f"{source}: missing '{section}.{k}'")
    fp = result["device"]["fingerprint"]
    for k in FINGERPRINT_KEYS:
        if k not in fp:
            raise ResultError(f"{source}: missing 'device.fingerprint.{k}'")
    if not isinstance(result.get("samples_ms"), list):
        raise ResultError(f"{source}: samples_ms must be a list")
    if result["status"] == "ok" and len(result["samples_ms"]) != result["settings"]["runs"]:
        raise ResultError(f"{source}: {len(result['samples_ms'])} samples for {result['settings']['runs']} runs")
    return result


def read_result(path: str | os.PathLike) -> dict:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultError(f"{path}: file not found") from None
    except ValueError as exc:
        raise ResultError(f"{path}: not valid JSON ({exc})") from None
    return validate(data, str(path))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def result_filename(result: dict) -> str:
    ts = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    a = result["artifact"]
    parts = [ts, result["device"]["name"], a.get("name") or "model", a["target"], a["backend"], a["precision"],
             a["sha256"][:8]]
    name = "-".join(_slug(str(p)) for p in parts)
    if result.get("status") != "ok":
        name += "-incomplete"
    return name + ".json"


def write_result(results_dir: str | os.PathLike, result: dict) -> Path:
    """Write ``result`` under ``results_dir`` atomically; never overwrite an existing file."""
    validate(result)
    result = json_safe(result)
    d = Path(results_dir)
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".result.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(result, fh, indent=2, allow_nan=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        base = result_filename(result)
        stem = base[:-len(".json")]
        for i in range(1, 10000):
            final = d / (base if i == 1 else f"{stem}-{i}.json")
            try:
                os.link(tmp, final)          # fails if the name is taken: no overwrite, ever
            except FileExistsError:
                continue
            except OSError:                  # no hard links here: claim the name, then replace it
                try:
                    os.close(os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                except FileExistsError:
                    continue
                os.replace(tmp, final)
            return final
        raise ResultError(f"{d}: no free result file name for {base}")
    finally:
        Path(tmp).unlink(missing_ok=True)
