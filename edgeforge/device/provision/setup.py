"""edgeforge devices setup NAME: install a device's model runtime from the host, with no internet there.

1. ask the device (one small stdlib program) for its architecture, Python version and C library:
   the platform its wheels must be built for;
2. ``pip download --only-binary=:all: --platform ... --python-version ... --implementation cp`` on
   the host: numpy, onnxruntime and Pillow (the host's versions, so device and host compute alike;
   Pillow decodes and pre-processes images for ``bench --end-to-end``), with
   their dependencies, into ``<cache>/wheels/<platform>/``;
3. upload each wheel under its sha256 to ``<workdir>/wheels/`` (a wheel the device holds is not sent);
4. unpack them on the device (wheels are zip files; no pip is needed there) into
   ``<workdir>/env/site-packages``, and write ``<workdir>/env/bin/python``, which runs the device's
   Python with that directory on its path;
5. point the device's ``python`` in devices.toml at it, so from then on the runner uses that env.

Paddle Lite publishes no ARM wheel: for a ``lite`` target on ARM, setup says so and points to the
docs/emulated-arm.md section on building Paddle Lite's ARM light API or ``benchmark_bin`` for the board.
"""
from __future__ import annotations

import hashlib
import json
import posixpath
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...cache import default_cache_dir, sha256_file
from ...errors import ConfigError, DeviceError
from ...options import ConnectionOptions
from ...runner import remote
from ...targets import load_target
from ..link.inventory import Device, load_inventory
from ..link.session import Session
from ..link.sync import LITE_REMEDY
from ..link.transport import SSHTransport

LITE_NOTE = f"paddlelite: {LITE_REMEDY}"

# Runs on the device: what its wheels must be built for. Standard library only.
DEVICE_FACTS = r'''
import json, os, platform, sys, sysconfig
libc, ver = platform.libc_ver()
print("@@edgeforge-facts " + json.dumps({
    "machine": platform.machine(), "python": platform.python_version(),
    "implementation": sys.implementation.name, "libc": libc, "libc_version": ver,
    "executable": os.path.realpath(sys.executable), "sysconfig_platform": sysconfig.get_platform(),
    "env_python": os.environ.get("EDGEFORGE_ENV")}))
'''


@dataclass
class SetupResult:
    device: str
    platform: list[str]
    python_version: str
    packages: list[str]
    wheels: list[dict] = field(default_factory=list)       # {name, sha256, size, uploaded}
    python: str = ""                                        # the env's python on the device
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    inventory_updated: bool = False
    reused: bool = False                                    # the device held this very env already


def platform_tags(machine: str, libc: str, libc_version: str) -> list[str]:
    """pip --platform tags a device with this architecture and C library can run, newest first."""
    arch = {"arm64": "aarch64", "amd64": "x86_64"}.get(machine, machine)
    if libc != "glibc":
        raise ConfigError(f"the device's C library is {libc or 'unknown'}, not glibc: no manylinux wheel runs "
                          "there", hint="install numpy and onnxruntime on the device by hand")
    m = re.match(r"(\d+)\.(\d+)", libc_version or "")
    if not m or int(m.group(1)) != 2:
        raise ConfigError(f"cannot tell the device's glibc version ({libc_version!r})")
    minor = int(m.group(2))
    tags = [f"manylinux_2_{v}_{arch}" for v in range(minor, 16, -1)]
    if minor >= 17:
        tags.append(f"manylinux2014_{arch}")
    return tags


def runtime_packages(target: str) -> tuple[list[str], list[str]]:
    """(pip requirements for the target's runtimes, notes on runtimes pip cannot provide)."""
    profile = load_target(target)
    reqs, notes = [_pinned("numpy")], []
    backends = profile.backends()
    if "onnx" in backends:
        reqs.append(_pinned("onnxruntime"))
    if "lite" in backends and profile.hardware.arch != "x86_64":
        notes.append(LITE_NOTE)
    elif "lite" in backends:
        reqs.append(_pinned("paddlelite"))
    return reqs, notes


def image_packages() -> list[str]:
    """What bench --end-to-end needs on the device besides the runtime: Pillow (decode and
    pre-process), the host's version. Optional: a platform without its wheel gets a note."""
    return [_pinned("pillow")]


def _pinned(dist: str) -> str:
    """``dist==<the host's version>``: device and host then compute with the same code."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{dist}=={version(dist)}"
    except PackageNotFoundError:
        return dist


def host_download(reqs: list[str], tags: list[str], python_version: str, dest: Path, logfile: Path) -> list[Path]:
    """``pip download`` the wheels (dependencies included) for that platform into ``dest``; the set
    resolved for these requirements is remembered there, so a second setup asks no index."""
    dest.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(json.dumps([reqs, tags, python_version]).encode()).hexdigest()[:16]
    record = dest / f"resolved-{key}.json"
    try:
        known = [dest / n for n in json.loads(record.read_text())]
        if known and all(f.is_file() for f in known):
            return known
    except (OSError, ValueError):
        pass
    cmd = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--implementation", "cp",
           "--python-version", python_version, "--dest", str(dest), "--progress-bar", "off",
           "--disable-pip-version-check"]
    for t in tags:
        cmd += ["--platform", t]
    with open(logfile, "w") as fh:
        fh.write(" ".join(cmd + reqs) + "\n")
        fh.flush()
        r = subprocess.run(cmd + reqs, stdout=fh, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        tail = [ln for ln in logfile.read_text().splitlines() if ln.strip()][-1:] or ["no output"]
        raise ConfigError(f"pip download for {tags[0]}, Python {python_version} failed: {tail[0][:160]}",
                          hint=f"see {logfile}; a package may publish no wheel for that platform")
    files = []      # pip says "Saved DEST/x.whl" or "File was already downloaded DEST/x.whl"
    for line in logfile.read_text().splitlines():
        m = re.match(r"^\s*(?:Saved|File was already downloaded)\s+(\S+\.whl)\s*$", line)
        if m and (dest / Path(m.group(1)).name) not in files:
            files.append(dest / Path(m.group(1)).name)
    missing = [f.name for f in files if not f.is_file()]
    if missing or not files:
        raise ConfigError(f"pip download left no wheel for {', '.join(missing) or ', '.join(reqs)}",
                          hint=f"see {logfile}")
    record.write_text(json.dumps([f.name for f in files]) + "\n")
    return files


def host_pip_install(reqs: list[str], site: Path, *, platform_tags, python_version, logfile: Path,
                     rootfs: Path) -> None:
    """``pip install --target`` for a rootfs being built (preinstalled wheels of a rootfs recipe)."""
    py = python_version or _rootfs_python(rootfs)
    tags = platform_tags or [f"manylinux_2_{v}_aarch64" for v in range(36, 16, -1)] + ["manylinux2014_aarch64"]
    cmd = [sys.executable, "-m", "pip", "install", "--only-binary=:all:", "--implementation", "cp",
           "--python-version", py, "--target", str(site), "--disable-pip-version-check", "--no-compile"]
    for t in tags:
        cmd += ["--platform", t]
    with open(logfile, "a") as fh:
        r = subprocess.run(cmd + reqs, stdout=fh, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise ConfigError(f"pip install into the rootfs failed (exit {r.returncode})", hint=f"see {logfile}")


def _rootfs_python(rootfs: Path) -> str:
    found = sorted(p.name[len("python"):] for p in (rootfs / "usr/lib").glob("python3.*"))
    if not found:
        raise ConfigError(f"no python3.X under {rootfs}/usr/lib")
    return found[-1]


def _marked(r, prefix: str, dev: Device, doing: str) -> dict:
    for line in reversed(r.stdout.splitlines()):
        if line.startswith(prefix):
            out = json.loads(line[len(prefix):])
            if "error" in out:
                raise DeviceError(dev.name, f"{doing}: {out['error']}")
            return out
    if r.timed_out:
        raise DeviceError(dev.name, f"{doing} timed out")
    tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
    if r.exit_code == 127:
        raise DeviceError(dev.name, f"python '{dev.python}' not found on the device",
                          hint="set python = ... in devices.toml to the device's Python 3")
    raise DeviceError(dev.name, f"{doing} failed (exit {r.exit_code}): {tail}")


def setup_device(name: str, *, inventory=None, packages: list[str] | None = None, cache: Path | None = None,
                 update_inventory: bool = True, opts: ConnectionOptions | None = None, on_step=None) -> SetupResult:
    """Install the target's runtime into ``<workdir>/env`` on device ``name`` (see the module doc).
    ``opts``: the connection options (as bench's): it reaches the device as bench does
    (:class:`.session.Session`: ``connect_timeout``, default 60 s, ``retries``,
    ``trust_new_host``) and works under the device's lease (a holder is waited for ``wait`` seconds, else
    :class:`~edgeforge.errors.Busy`); ``timeout`` (default 600 s) bounds each command."""
    o = opts or ConnectionOptions()
    timeout = o.timeout if o.timeout is not None else 600.0
    say = on_step or (lambda step, msg: None)
    inv = load_inventory(inventory)
    dev = inv.get(name)
    reqs, notes = runtime_packages(dev.target)
    reqs = packages or reqs
    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    ses = Session(dev, o, connect_timeout_s=o.connect_timeout if o.connect_timeout is not None else 60.0,
                  command_timeout_s=timeout, what="edgeforge devices setup", on_step=say)
    with ses:
        tr, lease = ses.tr, ses.lease
        facts = _marked(tr.python(["-c", DEVICE_FACTS], timeout=timeout, doing="asking the device"),
                        "@@edgeforge-facts ", dev, "asking the device for its platform")
        base_python = facts["executable"]
        if facts.get("env_python"):      # already a setup env: keep the python beneath it
            base_python = _base_python(tr, dev, facts["env_python"], timeout) or base_python
        tags = platform_tags(facts["machine"], facts["libc"], facts["libc_version"])
        py = ".".join(facts["python"].split(".")[:2])
        seconds["probe"] = time.monotonic() - t0
        say("setup", f"{dev.name}: {facts['machine']}, Python {facts['python']}, "
                     f"{facts['libc']} {facts['libc_version']}: wheels for {tags[0]}, cp{py.replace('.', '')}")
        t0 = time.monotonic()
        dest = (Path(cache) if cache else default_cache_dir()) / "wheels" / f"{tags[0]}-cp{py.replace('.', '')}"
        files = host_download(reqs, tags, py, dest, dest / "pip-download.log")
        if packages is None:
            try:
                files += [f for f in host_download(image_packages(), tags, py, dest, dest / "pip-download-images.log")
                          if f not in files]
                reqs = reqs + image_packages()
            except ConfigError as exc:
                notes.append(f"Pillow (bench --end-to-end): {exc.message}")
        seconds["download"] = time.monotonic() - t0
        say("download", f"{len(files)} wheel(s), {sum(f.stat().st_size for f in files) / 1e6:.1f} MB, "
                        f"in {seconds['download']:.1f} s")
        lease.renew()                    # the download may take a while; the device stays ours
        t0 = time.monotonic()
        wheels = _upload(tr, dev, files, timeout)
        seconds["upload"] = time.monotonic() - t0
        lease.renew()
        sent = [w for w in wheels if w["uploaded"]]
        say("upload", f"{len(sent)} sent, {len(wheels) - len(sent)} already on the device")
        t0 = time.monotonic()
        spec = {"workdir": dev.workdir, "python": base_python, "platform": tags[0],
                "wheels": [{k: w[k] for k in ("remote", "sha256", "name")} for w in wheels]}
        out = _marked(tr.python(["-c", remote.script("install"), json.dumps(spec)], timeout=timeout,
                                doing="installing the wheels"), "@@edgeforge-install ", dev, "installing the wheels")
        seconds["install"] = time.monotonic() - t0
    res = SetupResult(dev.name, tags, facts["python"], reqs, wheels, out["python"], notes,
                      {k: round(v, 1) for k, v in seconds.items()}, reused=bool(out.get("reused")))
    if update_inventory and dev.python != out["python"]:
        set_device_python(inv.path, dev.name, out["python"])
        res.inventory_updated = True
    return res


def _base_python(tr: SSHTransport, dev: Device, env_python: str, timeout: float) -> str | None:
    meta = posixpath.join(posixpath.dirname(posixpath.dirname(env_python)), "edgeforge-env.json")
    r = tr.run(["cat", meta], timeout=timeout, doing="reading the env's record")
    try:
        return json.loads(r.stdout)["python"] if r.exit_code == 0 else None
    except (ValueError, KeyError):
        return None


def _upload(tr: SSHTransport, dev: Device, files: list[Path], timeout: float) -> list[dict]:
    """Each wheel to ``<workdir>/wheels/<sha256[:16]>-<name>``; one already there is not sent."""
    wheels = []
    for f in files:
        digest = sha256_file(f)
        wheels.append({"name": f.name, "sha256": digest, "size": f.stat().st_size,
                       "remote": f"{digest[:16]}-{f.name}", "uploaded": False})
    wdir = posixpath.join(dev.workdir, "wheels")
    listing = tr.run(["sh", "-c", f'mkdir -p {wdir} && cd {wdir} && ls -1'], timeout=timeout,
                     doing="listing the device's wheels")
    if listing.exit_code != 0:
        raise DeviceError(dev.name, f"cannot create {wdir}: {(listing.stderr.strip().splitlines() or ['?'])[-1]}")
    held = set(listing.stdout.split())
    for w, f in zip(wheels, files):
        if w["remote"] not in held:          # the name carries the digest; install checks it
            tr.upload(f, posixpath.join(_abs(tr, dev, wdir), w["remote"]), timeout=timeout)
            w["uploaded"] = True
    return wheels


def _abs(tr: SSHTransport, dev: Device, path: str) -> str:
    if not path.startswith("~"):
        return path
    home = tr.run(["sh", "-c", "echo $HOME"], timeout=60, doing="finding the device's home").stdout.strip()
    return home + path[1:]


def set_device_python(path: Path, name: str, python: str) -> None:
    """Set ``python = "..."`` in the ``[devices.NAME]`` table of an inventory file, keeping the rest."""
    lines = Path(path).read_text().splitlines(keepends=True)
    header = re.compile(r'^\s*\[devices\.(?:"?)' + re.escape(name) + r'(?:"?)\]\s*(#.*)?$')
    start = next((i for i, ln in enumerate(lines) if header.match(ln.rstrip("\n"))), None)
    if start is None:
        raise ConfigError(f"{path}: no [devices.{name}] table to update",
                          hint=f'set python = "{python}" for {name} by hand')
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
    entry = f"python = {json.dumps(python)}\n"
    for i in range(start + 1, end):
        if re.match(r"^\s*python\s*=", lines[i]):
            lines[i] = entry
            break
    else:
        lines.insert(start + 1, entry)
    Path(path).write_text("".join(lines))
