"""``edgeforge doctor``: what this machine has, what is missing, and the command that fixes it.

One :class:`Item` per thing edgeforge uses. ``needed_for(target)`` says which items a target's
build needs (its default backend); the verb exits 0 when all of those are present, 2 when not.
Nothing here imports Paddle: versions come from package metadata, so doctor is quick.
"""
from __future__ import annotations

import platform
import re
import shutil
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

CORE_PYTHONS = ((3, 10), (3, 11), (3, 12))
ALWAYS = ("python", "paddle", "numpy")
NEEDS = {"onnx": ("paddle2onnx", "onnxruntime"), "lite": ("lite",)}
APT = "apt-get install -y"


@dataclass
class Item:
    name: str
    ok: bool | None          # None: information only (CPU flags)
    detail: str              # what was found, or what is missing
    fix: str = ""            # the command that fixes it

    def line(self, needed: bool, width: int = 80) -> str:
        status = "info" if self.ok is None else "ok" if self.ok else ("MISSING" if needed else "missing")
        head = f"{status:<8}{self.name:<12} "
        text = self.detail
        if self.ok is False and self.fix:   # the fix matters more than the detail
            text = f"{self.detail}: {self.fix}"
            if len(head) + len(text) > width:
                text = f"fix: {self.fix}"
        out = head + text
        return out if len(out) <= width else out[:width - 3] + "..."


def _dist(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _major(ver: str | None) -> int:
    m = re.match(r"(\d+)", ver or "")
    return int(m.group(1)) if m else 0


def check_python() -> Item:
    ok = sys.version_info[:2] in CORE_PYTHONS
    return Item("python", ok, f"{platform.python_version()} ({sys.executable})" if ok else
                f"{platform.python_version()} is not 3.10-3.12", "use python3.11 or python3.12 for the venv")


def check_dist(name: str, dist: str, fix: str, note: str = "") -> Item:
    v = _dist(dist)
    return Item(name, v is not None, f"{dist} {v}{note}" if v else f"{dist} not installed", fix)


def check_onnxruntime() -> Item:
    v = _dist("onnxruntime")
    if v is None:
        return Item("onnxruntime", False, "onnxruntime not installed", "pip install 'onnxruntime>=1.23,<1.24'")
    try:
        import onnxruntime

        eps = [p.replace("ExecutionProvider", "") for p in onnxruntime.get_available_providers()]
    except Exception as exc:  # noqa: BLE001 - reported as the item's state
        return Item("onnxruntime", False, f"{v} does not import ({type(exc).__name__})",
                    "pip install --force-reinstall 'onnxruntime>=1.23,<1.24'")
    return Item("onnxruntime", True, f"{v}; EPs: {', '.join(eps)}")


def check_numpy() -> Item:
    from .toolchain import find_lite

    v = _dist("numpy")
    tc = find_lite()
    lite_np = tc.numpy if tc else None
    ok = v is not None and (lite_np is None or _major(lite_np) < 2)
    detail = f"{v} (core)" if v else "not installed (core)"
    if tc is not None:
        detail += f", {lite_np} (Lite, needs <2)"
    fix = "edgeforge toolchain install lite" if v else "pip install 'numpy>=1.26,<2'"
    return Item("numpy", ok, detail, fix)


def check_lite() -> Item:
    from .toolchain import find_lite

    tc = find_lite()
    if tc is None:
        return Item("lite", False, "not installed", "edgeforge toolchain install lite")
    where = {"managed": "managed", "env": "$EDGEFORGE_LITE_PYTHON", "current": "this venv"}[tc.source]
    return Item("lite", True, f"paddlelite {tc.paddlelite}, Python {tc.python_version} ({where})")


def check_sshd() -> Item:
    from .device.provision.localsshd import SSHD

    ok = Path(SSHD).is_file()
    return Item("sshd", ok, f"{SSHD} (local device)" if ok else "not found",
                f"{APT} openssh-server")


def check_chromium() -> Item:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    return Item("chromium", exe is not None, f"{exe} (HTML test)" if exe else "not found",
                f"{APT} chromium")


def check_web() -> Item:
    """The browser device's parts (transport = "browser"): chromedriver, selenium, onnxruntime-web."""
    from .toolchain_web import find_web

    driver = shutil.which("chromedriver")
    sel = _dist("selenium")
    web = find_web()
    missing = [what for what, ok in (("chromium-driver", driver), ("selenium", sel), ("onnxruntime-web", web))
               if not ok]
    if missing:
        return Item("web", False, f"no {', '.join(missing)} (browser device)",
                    f"{APT} chromium chromium-driver; pip install 'edgeforge[web]'; edgeforge toolchain install web")
    return Item("web", True, f"onnxruntime-web {web.version}, selenium {sel} (browser device)")


def check_qemu() -> Item:
    exe = shutil.which("qemu-aarch64-static")
    return Item("qemu", exe is not None, f"{exe} (emulated device)" if exe else
                "not found", f"{APT} qemu-user-static binfmt-support")


def check_binfmt(root: Path = Path("/proc/sys/fs/binfmt_misc")) -> Item:
    entry = root / "qemu-aarch64"
    try:
        enabled = entry.read_text().splitlines()[0].strip() == "enabled"
    except (OSError, IndexError):
        enabled = False
    return Item("binfmt", enabled, "qemu-aarch64 enabled (emulated device)" if enabled else
                "qemu-aarch64 not registered", "update-binfmts --enable qemu-aarch64")


def check_cpu(cpuinfo: str | None = None) -> Item:
    from .runner.device_facts import cpu_flags   # the runner's fingerprint reads the same

    f = cpu_flags(cpuinfo)
    vnni = bool({"avx512_vnni", "avx_vnni"} & f)
    has = {"AVX2": "avx2" in f, "VNNI": vnni, "AVX-512": "avx512f" in f}
    flags = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in has.items())
    if vnni:
        verdict = "fast INT8 (VNNI)"
    elif has["AVX2"]:
        verdict = "INT8 at best ~2x fp32"
    else:
        verdict = "INT8 slow here"
    return Item("cpu", None, f"{flags}: {verdict}")


CHECKS = (check_python, lambda: check_dist("paddle", "paddlepaddle", "pip install paddlepaddle==3.3.1"),
          check_lite, lambda: check_dist("paddle2onnx", "paddle2onnx", "pip install paddle2onnx==1.3.1"),
          check_onnxruntime, check_numpy, check_sshd, check_chromium, check_web, check_qemu, check_binfmt, check_cpu)


def needed_for(target: str | None) -> set[str]:
    """Items a build for ``target`` needs (its default backend); without one, the ONNX core."""
    if target is None:
        return set(ALWAYS) | set(NEEDS["onnx"])
    from .targets import load_target

    profile = load_target(target)
    return set(ALWAYS) | set(NEEDS[profile.backend.default])


def diagnose(target: str | None = None) -> tuple[list[Item], set[str]]:
    needed = needed_for(target)
    return [check() for check in CHECKS], needed


def render(items: list[Item], needed: set[str], target: str | None, width: int = 80) -> tuple[list[str], bool]:
    lines = [it.line(it.name in needed, width) for it in items]
    missing = [it.name for it in items if it.name in needed and it.ok is False]
    what = f"target {target}" if target else "the core (ONNX builds)"
    if missing:
        summary = f"not ready for {what}: missing {', '.join(missing)}"
    else:
        summary = f"ready for {what}"
    lines.append(summary if len(summary) <= width else summary[:width - 3] + "...")
    return lines, not missing

