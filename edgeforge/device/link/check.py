"""edgeforge devices check: connect, fingerprint the device, list its runtimes, match its target."""
from __future__ import annotations

import json

from ...errors import ConnectionLost, RunnerCrashed, RunnerTimeout, RuntimeMissing
from ...options import ConnectionOptions
from ...runner import FACTS_FILE
from ...targets import load_target
from .settings import RUNTIME_FOR_BACKEND, arch_matches
from .inventory import load_inventory
from .session import Session
from .transport import SSHTransport


def probe_device(tr: SSHTransport, timeout: float, benchmark_bin: str | None = None) -> dict:
    """Run ``device_facts.py`` on the device, its source sent inline (nothing is written there):
    a few KB, far under the 128 KiB one argument may hold (the runner itself is not sent)."""
    dev = tr.device
    args = ["-c", FACTS_FILE.read_text(), "--workdir", dev.workdir]
    if benchmark_bin:
        args += ["--benchmark-bin", benchmark_bin]
    r = tr.python(args, timeout=timeout, doing="probing the device")
    if r.connection_lost:
        raise ConnectionLost(dev.name, f"connection to {dev.address} lost while probing the device")
    if r.timed_out:
        raise RunnerTimeout(dev.name, f"probe timed out after {timeout:g}s")
    if r.exit_code == 127:
        raise RuntimeMissing(dev.name, f"python '{dev.python}' not found on the device",
                          hint="set python = ... in devices.toml to a Python 3 with numpy")
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise RunnerCrashed(dev.name, f"probe failed with {dev.python} (exit {r.exit_code}): {tail}") from None


def check_device(name: str, *, inventory=None, opts: ConnectionOptions | None = None) -> dict:
    """Report on one device. ``matches`` says whether it can run what its target builds.
    ``opts``: the connection options (:class:`.session.Session`, no lease: the check only
    reads); ``inventory`` wins over ``opts.inventory``. Without ``opts`` one connect try."""
    o = opts or ConnectionOptions(retries=0)
    dev = load_inventory(inventory if inventory is not None else o.inventory).get(name)
    profile = load_target(dev.target)
    connect_timeout = o.connect_timeout or profile.bench.connect_timeout_s
    timeout = o.timeout or min(profile.bench.command_timeout_s, 120)
    bb = dev.benchmark_bin or ("benchmark_bin" if profile.bench.runner == "benchmark_bin" else None)
    # a lab device's place is held for the check
    with Session(dev, o, connect_timeout_s=connect_timeout, command_timeout_s=timeout, lease=False) as ses:
        tr = ses.tr
        probe = probe_device(tr, timeout, bb)
        recorded = list(tr.recorded_host_keys)
        where = tr.where
    rts = probe.get("runtimes", {})
    checks = []
    machine = probe.get("machine")
    checks.append({"check": "architecture", "required": True, "ok": arch_matches(profile.hardware.arch, machine),
                   "detail": f"device {machine}, target {profile.hardware.arch}"})
    checks.append({"check": "numpy", "required": True, "ok": bool(probe.get("numpy")),
                   "detail": probe.get("numpy") or f"not importable by {probe.get('executable')}"})
    for backend in profile.backends():
        required = backend == profile.backend.default
        if backend == "lite" and bb:
            info = rts.get("benchmark_bin", {})
            checks.append({"check": "runtime for lite (benchmark_bin)", "required": required,
                           "ok": bool(info.get("present")),
                           "detail": f"{info.get('path')} {info.get('version', '')}".strip() if info.get("present")
                           else f"{bb}: {info.get('error', 'not found')}"})
            continue
        rt_name = RUNTIME_FOR_BACKEND[backend]
        info = rts.get(rt_name, {})
        ok = bool(info.get("present"))
        detail = f"{rt_name} {info.get('version')}" if ok else f"{rt_name}: {info.get('error', 'missing')}"
        if not ok and backend == "lite" and profile.hardware.arch != "x86_64":
            from .sync import LITE_REMEDY
            detail += f"; {LITE_REMEDY}"
        if ok and backend == "onnx":
            wanted = list(profile.backend.onnx.execution_providers)
            have = [p for p in wanted if p in info.get("providers", [])]
            detail += f"; providers {', '.join(have) or 'none'} of {', '.join(wanted)}"
            ok = bool(have)
        checks.append({"check": f"runtime for {backend}", "required": required, "ok": ok, "detail": detail})
    wd = probe.get("workdir") or {}
    checks.append({"check": "workdir", "required": True, "ok": bool(wd.get("writable")),
                   "detail": f"{wd.get('path')} ({'exists' if wd.get('exists') else 'will be created'}"
                             f"{'' if wd.get('writable') else ', not writable'})"})
    return {"device": dev.name, "address": where, "target": dev.target, "default_backend": profile.backend.default,
            "python": {"version": probe.get("python"), "executable": probe.get("executable")},
            "fingerprint": probe.get("fingerprint", {}), "runtimes": rts, "checks": checks,
            "recorded_host_keys": recorded,
            "matches": all(c["ok"] for c in checks if c["required"])}
