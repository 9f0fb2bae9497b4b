"""Who measured what: the identities that decide which results may be compared or paired.

- a *device fingerprint* is the stable part of what the runner recorded about the device:
  CPU model, kernel, core count, frequency governor, and for a browser device the browser
  (not temperature or load, which change from run to run and are reported, not matched);
- a *model* is the build name a result carries (top-level ``model`` or ``name``);
- an INT8 result's *float counterpart* is an fp32 result of the same model, target and backend
  on the same device (name and stable fingerprint) with the same runtime (name and version).
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

STABLE_FINGERPRINT_KEYS = ("cpu_model", "kernel", "cores", "governor", "browser")   # browser: web devices only
FLOAT_PRECISION = "fp32"


def short(sha256: str) -> str:
    return sha256[:12]


def model_name(r: dict) -> str | None:
    for value in (r.get("model"), r.get("name"), r["artifact"].get("model"), r["artifact"].get("name")):
        if isinstance(value, str) and value:
            return value
    return None


def precision(r: dict) -> str:
    return str(r["artifact"]["precision"])


def label(r: dict) -> str:
    """``model/target/backend/precision`` — what a person calls this result."""
    a = r["artifact"]
    return f"{model_name(r) or '?'}/{a['target']}/{a['backend']}/{a['precision']}"


def p50_ms(r: dict) -> float:
    """The run's median latency: the bench summary's, else computed from the raw samples."""
    value = r["summary"].get("p50_ms")
    return float(value) if isinstance(value, (int, float)) else float(np.median(r["samples_ms"]))


def emulated(r: dict) -> str | None:
    """How the run's device was emulated (``qemu-user``; the runner records it), None on hardware."""
    return (r.get("device") or {}).get("fingerprint", {}).get("emulated") or None


def emulated_reason(r: dict, who: str) -> str:
    """``A ran under qemu-user (cortex-a72 ...)``: why its timings are not performance figures."""
    return f"{who} ran under {emulated(r)} ({r['device']['fingerprint'].get('cpu_model')})"


def stable_fingerprint(r: dict) -> dict:
    fp = r["device"]["fingerprint"]
    return {k: fp[k] for k in STABLE_FINGERPRINT_KEYS if k in fp}


def fingerprint_id(r: dict) -> str:
    """A short name for the stable fingerprint, e.g. ``fp-3f9c01ab``."""
    blob = json.dumps(stable_fingerprint(r), sort_keys=True, default=str)
    return "fp-" + hashlib.sha256(blob.encode()).hexdigest()[:8]


def fingerprint_differences(a: dict, b: dict) -> tuple[list[str], list[str]]:
    """(``key: A vs B`` for stable keys both record and that differ, keys only one records)."""
    fa, fb = a["device"]["fingerprint"], b["device"]["fingerprint"]
    differ, unknown = [], []
    for k in STABLE_FINGERPRINT_KEYS:
        if k in fa and k in fb:
            if fa[k] != fb[k]:
                differ.append(f"{k} {fa[k]!r} vs {fb[k]!r}")
        elif k in fa or k in fb:
            unknown.append(k)
    return differ, unknown


def runtime_differences(a: dict, b: dict) -> list[str]:
    ra, rb = a["runtime"], b["runtime"]
    return [f"{k} {ra[k]!r} vs {rb[k]!r}" for k in ("name", "version") if ra[k] != rb[k]]


def same_device(a: dict, b: dict) -> bool:
    return a["device"]["name"] == b["device"]["name"] and not fingerprint_differences(a, b)[0]


def float_counterpart(r: dict, results: list[dict]) -> tuple[dict | None, str]:
    """The fp32 result to measure INT8 result ``r`` against, or (None, why there is none).

    Same model, target and backend, same device (name and stable fingerprint) and same runtime
    (name and version): otherwise the ratio would mix the quantization's effect with a runtime's
    or a machine's. Those with the same ``settings.threads`` and ``settings.power_mode`` are
    preferred (a sweep). Among several, the newest (``created_at``), then the last given. Results
    without a model name pair only when the device and target hold exactly one unnamed result of
    each precision.
    """
    model, a = model_name(r), r["artifact"]
    where = f"{model or 'an unnamed model'}/{a['target']}/{a['backend']} on {r['device']['name']}"
    peers = [x for x in results if x is not r and model_name(x) == model and x["artifact"]["target"] == a["target"]
             and same_device(x, r)]
    floats = [x for x in peers if precision(x) == FLOAT_PRECISION]
    usable = [x for x in floats if x["artifact"]["backend"] == a["backend"] and not runtime_differences(x, r)]
    if not usable:
        others = sorted({f"{x['artifact']['backend']} ({x['runtime']['name']} {x['runtime']['version']})"
                         for x in floats})
        found = f"; found fp32 only on {', '.join(others)}, not comparable" if others else ""
        return None, f"no {FLOAT_PRECISION} result of {where} with the same device fingerprint and runtime{found}"
    # a sweep holds fp32 runs at several thread counts / power modes: pair like with like when we can
    alike = [x for x in usable if all((x.get("settings") or {}).get(k) == (r.get("settings") or {}).get(k)
                                      for k in ("threads", "power_mode"))]
    usable = alike or usable
    if model is None and (len(usable) > 1 or any(precision(x) == precision(r) for x in peers)):
        return None, (f"several unnamed results on {r['device']['name']}/{a['target']}: cannot tell which "
                      f"{FLOAT_PRECISION} result belongs to which model (results carry no name)")
    return max(enumerate(usable), key=lambda ix: (str(ix[1].get("created_at") or ""), ix[0]))[1], ""
