#!/usr/bin/env python3
"""What a device is: its CPU, memory, governor, temperature, Python and model runtimes.

Standard library only (numpy and the runtimes are reported when importable). Part of the runner
zipapp (the runner imports it), and sent alone by ``edgeforge devices check`` with ``python -c``
(tests/unit/test_device_facts.py keeps it small)::

    python3 device_facts.py [--benchmark-bin PATH] [--workdir DIR]     JSON on one line
"""
from __future__ import annotations

import glob
import json
import os
import platform
import sys

try:
    import numpy as np
except ImportError:  # the probe still reports the device
    np = None

FACTS_VERSION = 1


def dist_version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:  # noqa: BLE001
        return "unknown"


# ---------------------------------------------------------------- device fingerprint

_ARM_PARTS = {  # /proc/cpuinfo "CPU part" for ARM Ltd. (implementer 0x41) cores
    "0xd03": "Cortex-A53", "0xd04": "Cortex-A35", "0xd05": "Cortex-A55", "0xd07": "Cortex-A57",
    "0xd08": "Cortex-A72", "0xd09": "Cortex-A73", "0xd0a": "Cortex-A75", "0xd0b": "Cortex-A76",
    "0xd0c": "Neoverse-N1", "0xd0d": "Cortex-A77", "0xd41": "Cortex-A78", "0xd42": "Cortex-A78AE",
    "0xd44": "Cortex-X1", "0xd46": "Cortex-A510", "0xd47": "Cortex-A710", "0xd48": "Cortex-X2",
    "0xd4d": "Cortex-A715", "0xd4e": "Cortex-X3", "0xc07": "Cortex-A7", "0xc09": "Cortex-A9",
    "0xc0f": "Cortex-A15",
}


def read_file(path):
    try:
        with open(path) as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cpuinfo_fields():
    fields = {}
    for line in (read_file("/proc/cpuinfo") or "").splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            fields.setdefault(key.strip().lower(), []).append(value.strip())
    return fields


# CPU flags that decide INT8 kernels (x86: VNNI / AVX-512; ARM: dot product, i8mm)
INT8_CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8",
                  "asimd", "asimddp", "i8mm", "asimdhp", "fphp")


def cpu_flags(cpuinfo=None):
    """The CPU feature flags (x86 ``flags``, ARM ``Features``) from /proc/cpuinfo."""
    text = read_file("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return frozenset(value.split())
    return frozenset()


_HWCAP = {1: "asimd", 9: "fphp", 10: "asimdhp", 20: "asimddp", 22: "sve"}     # arm64 AT_HWCAP bits
_HWCAP2 = {13: "i8mm", 14: "bf16"}                                            # arm64 AT_HWCAP2 bits


def hwcap_flags(auxv=None):
    """aarch64 feature flags from the kernel's auxiliary vector (AT_HWCAP 16, AT_HWCAP2 26). Under
    qemu-user it is the emulated CPU's, where /proc/cpuinfo is the host's."""
    import struct

    if auxv is None:
        try:
            with open("/proc/self/auxv", "rb") as fh:
                auxv = fh.read()
        except OSError:
            return frozenset()
    vec = dict(struct.iter_unpack("<QQ", auxv[: len(auxv) // 16 * 16]))
    out = {name for bit, name in _HWCAP.items() if vec.get(16, 0) >> bit & 1}
    out |= {name for bit, name in _HWCAP2.items() if vec.get(26, 0) >> bit & 1}
    return frozenset(out)


def int8_cpu_flags(flags):
    """The INT8-relevant subset of ``flags``, in a fixed order."""
    return [f for f in INT8_CPU_FLAGS if f in flags]


def cpu_model():
    info = _cpuinfo_fields()
    for key in ("model name", "cpu model"):
        if info.get(key):
            return info[key][0]
    parts = []
    for part in info.get("cpu part", []):
        name = _ARM_PARTS.get(part.lower(), "ARM part %s" % part)
        if name not in parts:
            parts.append(name)
    board = (info.get("model") or info.get("hardware") or [None])[0]
    if parts:
        return " + ".join(parts) + (" (%s)" % board if board else "")
    return board or platform.processor() or platform.machine() or None


def temperature_c():
    """Hottest thermal zone in degrees C, or None where /sys/class/thermal has none."""
    temps = []
    for zone in glob.glob("/sys/class/thermal/thermal_zone*/temp"):
        raw = read_file(zone)
        try:
            value = int(raw) / 1000.0
        except (TypeError, ValueError):
            continue
        if -40.0 < value < 150.0:
            temps.append(value)
    return max(temps) if temps else None


def _governor():
    govs = []
    for path in sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")):
        g = read_file(path)
        if g and g not in govs:
            govs.append(g)
    return ",".join(govs) if govs else None


def _meminfo_mb():
    out = {}
    for line in (read_file("/proc/meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            try:
                out[key] = round(int(rest.split()[0]) / 1024.0, 1)
            except (IndexError, ValueError):
                pass
    return out.get("MemTotal"), out.get("MemAvailable")


def emulation():
    """("qemu-user", CPU model) when this process runs under user-mode emulation, else None: the
    emulated device's sshd sets EDGEFORGE_EMULATED and QEMU_CPU; an ARM process that reads an x86
    /proc/cpuinfo is emulated too."""
    how, cpu = os.environ.get("EDGEFORGE_EMULATED"), os.environ.get("QEMU_CPU")
    if not how and platform.machine().startswith(("aarch64", "arm")) and _cpuinfo_fields().get("vendor_id"):
        how = "qemu-user"
    return (how, cpu or "unknown CPU model") if how else None


def fingerprint():
    """What the numbers depend on, read where the device exposes it (None where it does not)."""
    emu = emulation()
    total, available = _meminfo_mb()
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    max_khz = read_file("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    return {
        "cpu_model": "%s (%s on %s)" % (emu[1], emu[0], cpu_model()) if emu else cpu_model(),
        "emulated": emu[0] if emu else None,
        "cores": os.cpu_count(),
        "cpu_flags": int8_cpu_flags(hwcap_flags() if emu else cpu_flags()),
        "arch": platform.machine(),
        "kernel": platform.release(),
        "os": platform.system(),
        "hostname": platform.node(),
        "governor": _governor(),
        "cpu_max_mhz": round(int(max_khz) / 1000.0) if max_khz and max_khz.isdigit() else None,
        "temp_c": temperature_c(),
        "load_avg": load,
        "mem_total_mb": total,
        "mem_available_mb": available,
        "python": platform.python_version(),
        "numpy": getattr(np, "__version__", None),
    }


def peak_rss_mb(children=False):
    try:
        import resource
    except ImportError:
        return None
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    kb = resource.getrusage(who).ru_maxrss
    if sys.platform == "darwin":
        kb /= 1024.0
    return round(kb / 1024.0, 2)


# ---------------------------------------------------------------- probe

def probe_runtimes(benchmark_bin=None):
    """Which runtimes this Python can use, with versions. Imports each one to be sure."""
    out = {}
    try:
        import onnxruntime as ort
        out["onnxruntime"] = {"present": True, "version": ort.__version__,
                              "providers": list(ort.get_available_providers())}
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install
        out["onnxruntime"] = {"present": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    try:
        from paddlelite import lite
        out["paddlelite"] = {"present": True, "version": dist_version("paddlelite"),
                             "threads_settable": hasattr(lite.MobileConfig, "set_threads")}
    except Exception as exc:  # noqa: BLE001
        out["paddlelite"] = {"present": False, "error": "%s: %s" % (type(exc).__name__, exc)}
    if benchmark_bin:
        out["benchmark_bin"] = benchmark_bin_info(benchmark_bin)
    return out


def benchmark_bin_info(path):
    import shutil
    import subprocess

    if path and os.sep not in path:
        path = shutil.which(path) or path
    if not (path and os.path.isfile(path) and os.access(path, os.X_OK)):
        return {"present": False, "path": path, "error": "not an executable file"}
    try:
        proc = subprocess.run([path, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=20, universal_newlines=True)
        text = proc.stdout.strip().splitlines()
        version = text[-1].split()[-1] if text else "unknown"
    except Exception:  # noqa: BLE001
        version = "unknown"
    return {"present": True, "path": path, "version": version}


def workdir_info(path):
    path = os.path.abspath(os.path.expanduser(path))
    probe_at = path
    while not os.path.exists(probe_at) and os.path.dirname(probe_at) != probe_at:
        probe_at = os.path.dirname(probe_at)
    return {"path": path, "exists": os.path.isdir(path), "writable": os.access(probe_at, os.W_OK | os.X_OK)}


def probe(benchmark_bin=None, workdir=None):
    out = {"facts_version": FACTS_VERSION, "python": platform.python_version(),
           "executable": sys.executable, "machine": platform.machine(),
           "numpy": getattr(np, "__version__", None), "runtimes": probe_runtimes(benchmark_bin),
           "fingerprint": fingerprint()}
    if workdir:
        out["workdir"] = workdir_info(workdir)
    return out



def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(prog="device_facts.py")
    ap.add_argument("--benchmark-bin")
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    json.dump(probe(args.benchmark_bin, args.workdir), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
