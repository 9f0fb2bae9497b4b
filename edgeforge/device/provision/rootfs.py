"""The aarch64 Debian userland of the emulated device: built once with debootstrap, cached as a tarball.

The recipe (suite, architecture, variant, packages, preinstalled wheels, builder version) names the
tarball, ``<cache>/emulate/rootfs-<suite>-<arch>-<key>.tar.zst``; a second ``start`` only unpacks it.
Stage one of debootstrap runs natively, stage two inside the rootfs under qemu-user through binfmt_misc,
so this needs root, Debian's ``debootstrap``, ``qemu-user-static`` and ``binfmt-support``.

    python -m edgeforge.device.provision.rootfs build        # build (or find) the default rootfs, print its path
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ...cache import default_cache_dir
from ...errors import ConfigError, EdgeforgeError, RootfsFailed

BUILDER_VERSION = 1
BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
QEMU = "/usr/bin/qemu-aarch64-static"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
NEEDS = "root, and Debian's qemu-user-static, binfmt-support and debootstrap " \
        "(apt-get install -y qemu-user-static binfmt-support debootstrap)"


@dataclass(frozen=True)
class Recipe:
    """What goes into the rootfs. Changing any field makes a new tarball."""

    suite: str = "bookworm"
    arch: str = "arm64"
    variant: str = "minbase"
    packages: tuple[str, ...] = ("python3", "openssh-server", "libgomp1")
    wheels: tuple[str, ...] = ()          # "name==version", unpacked into /usr/local (none by default)
    builder: int = BUILDER_VERSION

    def key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def tarball(self, cache: Path | None = None) -> Path:
        root = Path(cache) if cache else default_cache_dir()
        return root / "emulate" / f"rootfs-{self.suite}-{self.arch}-{self.key()}.tar.zst"


@dataclass
class BuildReport:
    tarball: Path
    built: bool                           # False: found in the cache
    seconds: dict[str, float] = field(default_factory=dict)


def log(msg: str) -> None:
    print(f"[emulate] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- preconditions


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ConfigError(f"{what} needs root (chroot, mounts, binfmt_misc)",
                          hint=f"run as root; it needs {NEEDS}")


def ensure_binfmt() -> None:
    """binfmt_misc mounted and qemu-aarch64 registered (with the F flag, so no qemu inside the rootfs)."""
    require_root("the emulated aarch64 device")
    if not Path(QEMU).is_file() or shutil.which("update-binfmts") is None:
        raise ConfigError(f"{QEMU} or update-binfmts is missing", hint=f"it needs {NEEDS}")
    if not (BINFMT_DIR / "register").exists():
        r = subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)],
                           capture_output=True, text=True)
        if r.returncode != 0 or not (BINFMT_DIR / "register").exists():
            raise ConfigError(f"binfmt_misc is not available: {r.stderr.strip() or 'mount failed'}",
                              hint="the kernel needs binfmt_misc (modprobe binfmt_misc) and a mountable "
                                   "/proc/sys/fs/binfmt_misc (a privileged container)")
    entry = BINFMT_DIR / "qemu-aarch64"
    if not entry.exists() or "enabled" not in entry.read_text():
        r = subprocess.run(["update-binfmts", "--enable", "qemu-aarch64"], capture_output=True, text=True)
        if r.returncode != 0 or not entry.exists():
            raise ConfigError(f"cannot register qemu-aarch64 with binfmt_misc: "
                              f"{(r.stderr.strip() or r.stdout.strip() or 'no entry').splitlines()[-1]}",
                              hint=f"it needs {NEEDS}")
    flags = re.search(r"^flags:\s*(\S*)", entry.read_text(), re.MULTILINE)
    if not flags or "F" not in flags.group(1):
        raise ConfigError("qemu-aarch64 is registered without the F flag, so a chroot cannot find qemu",
                          hint="reinstall qemu-user-static (Debian's registers it with F)")


def apt_mirror(suite: str = "bookworm", sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt already uses here (so CI needs no other host); $EDGEFORGE_DEBIAN_MIRROR wins."""
    env = os.environ.get("EDGEFORGE_DEBIAN_MIRROR")
    if env:
        return env
    files = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*"))]
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.suffix == ".sources":       # deb822 stanzas
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", stanza, re.MULTILINE))
                if suite in fields.get("Suites", "").split() and "/debian" in fields.get("URIs", ""):
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                m = re.match(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line.strip())
                if m and m.group(2) == suite and "/debian" in m.group(1):
                    return m.group(1)
    return DEFAULT_MIRROR


# ---------------------------------------------------------------- mounts


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path``, deepest first (from /proc/mounts)."""
    prefix = str(Path(path).resolve())
    out = []
    with open("/proc/mounts") as fh:
        for line in fh:
            point = line.split()[1].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                out.append(point)
    return sorted(set(out), key=lambda p: -p.count("/"))


def unmount_all(path: Path) -> None:
    for point in mounts_under(path):
        subprocess.run(["umount", "-l", point], capture_output=True)
    left = mounts_under(path)
    if left:
        raise RootfsFailed(f"still mounted under {path}: {', '.join(left)}", hint="umount -R by hand")


def remove_tree(path: Path) -> None:
    """rm -rf a rootfs, but never through a mount (a bound /dev would take the host's with it)."""
    path = Path(path)
    if not path.exists():
        return
    unmount_all(path)
    shutil.rmtree(path)


# ---------------------------------------------------------------- build


# debootstrap's second stage under qemu-user, measured on a bare 2-core x86-64 machine on
# 2026-12-05 (issue 47): 768 s of a 14.5 min `devices emulate start --setup`. Each build records
# its own figures beside the tarball (timings.json); the next estimate uses the last of them.
STAGE2_MEASURED_S = 768.0
TIMINGS = "timings.json"


def stage2_estimate(cache_dir: Path) -> tuple[float, str]:
    """Seconds the second stage will take here, and where the figure comes from."""
    try:
        last = json.loads((cache_dir / TIMINGS).read_text())["stage2"]
        if isinstance(last, (int, float)) and 0 < last < 86400:
            return float(last), "the last build here"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return STAGE2_MEASURED_S, "measured on a bare 2-core machine"


def _record(cache_dir: Path, seconds: dict[str, float]) -> None:
    try:
        (cache_dir / TIMINGS).write_text(json.dumps({k: round(v, 1) for k, v in seconds.items()}) + "\n")
    except OSError:
        pass        # only the next estimate is less exact


def _run(cmd: list[str], logfile: Path, what: str) -> float:
    t0 = time.monotonic()
    with open(logfile, "a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        r = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        tail = logfile.read_text().strip().splitlines()[-1:] or ["no output"]
        raise RootfsFailed(f"{what} failed (exit {r.returncode}): {tail[0][:160]}", hint=f"see {logfile}")
    return time.monotonic() - t0


def _unpack_wheels(recipe: Recipe, tree: Path, logfile: Path) -> None:
    if not recipe.wheels:
        return
    from .setup import host_pip_install  # lazy: setup imports this module
    site = tree / "usr/local/lib/python3/dist-packages"
    host_pip_install(list(recipe.wheels), site, platform_tags=None, python_version=None, logfile=logfile,
                     rootfs=tree)


def build(recipe: Recipe = Recipe(), cache: Path | None = None, mirror: str | None = None) -> BuildReport:
    """Return the cached tarball for ``recipe``, building it first if it is not there."""
    tarball = recipe.tarball(cache)
    if tarball.is_file():
        return BuildReport(tarball, built=False)
    ensure_binfmt()
    if shutil.which("debootstrap") is None or shutil.which("zstd") is None:
        raise ConfigError("debootstrap or zstd is missing",
                          hint="apt-get install -y debootstrap zstd qemu-user-static binfmt-support")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with open(tarball.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)      # a second builder waits, then finds the tarball
        if tarball.is_file():
            return BuildReport(tarball, built=False)
        return _build_locked(recipe, tarball, mirror or apt_mirror(recipe.suite))


def _build_locked(recipe: Recipe, tarball: Path, mirror: str) -> BuildReport:
    tree = tarball.parent / f"build-{recipe.key()}"
    logfile = tarball.parent / f"build-{recipe.key()}.log"
    remove_tree(tree)
    logfile.write_text(f"recipe {json.dumps(asdict(recipe))}\nmirror {mirror}\n")
    seconds: dict[str, float] = {}
    try:
        log(f"debootstrap stage one ({recipe.suite}/{recipe.arch} from {mirror}); log {logfile}")
        seconds["stage1"] = _run(["debootstrap", f"--arch={recipe.arch}", "--foreign",
                                  f"--variant={recipe.variant}", f"--include={','.join(recipe.packages)}",
                                  recipe.suite, str(tree), mirror], logfile, "debootstrap stage one")
        est, source = stage2_estimate(tarball.parent)
        log(f"debootstrap stage two under qemu-user ({seconds['stage1']:.0f} s so far; about "
            f"{math.ceil(est / 60)} min more: {est:.0f} s {source})")
        seconds["stage2"] = _run(["chroot", str(tree), "/debootstrap/debootstrap", "--second-stage"],
                                 logfile, "debootstrap stage two")
        unmount_all(tree)
        t0 = time.monotonic()
        _unpack_wheels(recipe, tree, logfile)
        _trim(tree, recipe)
        seconds["wheels"] = time.monotonic() - t0
        log("packing the rootfs")
        part = tarball.with_name(tarball.name + ".part")
        seconds["pack"] = _run(["tar", "--numeric-owner", "--xattrs", "-I", "zstd -T0 -3", "-C", str(tree),
                                "-cf", str(part), "."], logfile, "tar")
        part.rename(tarball)
        _record(tarball.parent, seconds)
    finally:
        remove_tree(tree)
    log(f"rootfs cached: {tarball} ({tarball.stat().st_size / 1e6:.0f} MB); "
        + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))
    return BuildReport(tarball, built=True, seconds=seconds)


def _trim(tree: Path, recipe: Recipe) -> None:
    """Drop what every device regenerates or never needs: host keys, apt lists and archives."""
    for key in (tree / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    for sub in ("var/lib/apt/lists", "var/cache/apt/archives"):
        for item in (tree / sub).glob("*"):
            if item.is_file():
                item.unlink()
    (tree / "etc/edgeforge-rootfs.json").write_text(json.dumps(asdict(recipe), indent=1) + "\n")


def unpack(tarball: Path, dest: Path) -> float:
    """Unpack a cached rootfs into ``dest`` (which must not exist). Returns the seconds it took."""
    t0 = time.monotonic()
    dest.mkdir(parents=True)
    r = subprocess.run(["tar", "--numeric-owner", "--xattrs", "-I", "zstd -T0", "-C", str(dest),
                        "-xf", str(tarball)], capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)
        raise RootfsFailed(f"cannot unpack {tarball}: {r.stderr.strip()[:160]}",
                           hint="delete the tarball to rebuild it")
    return time.monotonic() - t0


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] != ["build"]:
        print("usage: python -m edgeforge.device.provision.rootfs build", file=sys.stderr)
        return 2
    try:
        rep = build()
    except EdgeforgeError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    print(rep.tarball)
    return 0


if __name__ == "__main__":
    sys.exit(main())
