"""A build's files onto a device by digest, as bench, load and deploy send them.

:func:`local_digests` hashes what ships (the artifact checked against its manifest);
:func:`prepare` asks the device (``runner/remote/prepare.py``) for the sha256 of what it already
holds under ``<workdir>/<subdir>/``, its architecture and whether its Python has the modules the
run needs; :func:`upload` sends only the files that are missing or differ (a temporary name,
then a rename). Each works over (transport, device, settings): nothing of a bench's state.
"""
from __future__ import annotations

import json
import posixpath
import time
from pathlib import Path
from typing import Callable

from ...cache import sha256_file
from ...errors import ConfigError, ConnectionLost, Misconfigured, RunnerCrashed, RunnerTimeout, RuntimeMissing
from ...runner import remote
from .events import tail
from .lease import Lease
from .settings import PREPARE_PREFIX, BenchSettings, arch_matches, needed_modules
from .transport import SSHTransport

Step = Callable[[str, str], None]   # (step, message)

LITE_README = "docs/emulated-arm.md, 'Paddle Lite on an ARM board'"
LITE_REMEDY = (f"no ARM paddlelite wheel exists on the package registry: build Paddle Lite's ARM light API "
               f"or benchmark_bin for the board (see {LITE_README})")


def runtime_remedy(missing: list[str], machine: str | None, device: str) -> str:
    """What to do about runtime modules a device lacks: Lite on ARM needs a build, the rest
    ``devices setup``."""
    if "paddlelite" in missing and (machine or "").startswith(("aarch64", "arm")):
        return LITE_REMEDY
    return (f"edgeforge devices setup {device} installs {' and '.join(missing)} from the host; or point "
            "python = ... in devices.toml at a Python that has them")


def local_digests(build_dir: Path, manifest: dict, files: dict[str, Path]) -> dict[str, str]:
    """sha256 of each file that ships, by its path on the device; ConfigError when the artifact
    is not the one its manifest names."""
    digests = {rel: sha256_file(p) for rel, p in files.items()}
    art = manifest["artifact"]
    for doc in (art, manifest.get("float_artifact") or {}):
        if doc.get("path") in digests and digests[doc["path"]] != doc["sha256"]:
            raise ConfigError(f"{Path(build_dir) / doc['path']} does not match the sha256 in its manifest",
                              hint="the build was modified; rebuild it")
    return digests


def raise_for_transport(r, device, timeout_s: float, doing: str) -> None:
    """A command that lost its connection or ran out of time, as the DeviceError it is."""
    if r.connection_lost:
        raise ConnectionLost(device.name, f"connection to {device.address} lost while {doing}",
                             hint="the device or its sshd went away; results already measured are kept")
    if r.timed_out:
        raise RunnerTimeout(device.name, f"timed out after {timeout_s:g}s while {doing}")


def prepare(tr: SSHTransport, manifest: dict, settings: BenchSettings, digests: dict[str, str],
            subdir: str, extra_modules: tuple[str, ...] = (), modules: bool = True) -> dict:
    """What the device holds under ``<workdir>/<subdir>/`` (``digests``: by relative path;
    ``dir``: the directory), checked against the build: the architecture, a writable workdir,
    the modules the run imports. A file the device holds by digest in ``<workdir>/.blobs/``
    (another build sent it) is linked in, not sent again (``linked``). Raises the DeviceError
    that says which is wrong."""
    dev = tr.device
    req = {"workdir": dev.workdir, "subdir": subdir,
           "modules": (needed_modules(manifest, settings) + list(extra_modules)) if modules else [],
           "mkdirs": sorted({posixpath.dirname(r) for r in digests if posixpath.dirname(r)}),
           "files": sorted(digests), "shared": dict(digests)}
    doing = "checking the files on the device"
    r = tr.python(["-c", remote.script("prepare"), json.dumps(req)],
                  timeout=min(settings.command_timeout_s, 120), doing=doing)
    raise_for_transport(r, dev, settings.command_timeout_s, doing)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith(PREPARE_PREFIX)), None)
    if r.exit_code == 127 or (line is None and "not found" in r.stderr):
        raise RuntimeMissing(dev.name, f"python '{dev.python}' not found on the device",
                             hint="set python = ... in devices.toml to a Python 3 with numpy and the runtime")
    if line is None:
        raise RunnerCrashed(dev.name, f"could not check files with {dev.python} (exit {r.exit_code}): "
                                      f"{tail(r.stderr)}")
    info = json.loads(line[len(PREPARE_PREFIX):])
    arch = manifest.get("target_profile", {}).get("arch")
    if arch and not arch_matches(arch, info.get("machine")):
        raise Misconfigured(dev.name, f"device is {info.get('machine')}, target {manifest['target']} is {arch}",
                            hint="check devices.toml: target = ... for this device")
    if not info.get("writable"):
        raise Misconfigured(dev.name, f"workdir {info['dir']} is not writable: "
                                      f"{info.get('error', 'permission denied')}",
                            hint="set workdir = ... in devices.toml to a directory the user can write")
    missing = [("Pillow" if m == "PIL" else m) for m, ok in info["modules"].items() if not ok]
    if missing:
        raise RuntimeMissing(dev.name, f"runtime missing: {', '.join(missing)} not importable by "
                                       f"{info['executable']} (Python {info['python']})",
                             hint=runtime_remedy(missing, info.get("machine"), dev.name))
    return info


def upload(tr: SSHTransport, files: dict[str, Path], local: dict[str, str], held: dict[str, str],
           remote_dir: str, *, timeout_s: float, lease: Lease | None = None,
           on_step: Step | None = None) -> dict:
    """Send the files whose sha256 the device does not hold (``held``: what :func:`prepare`
    read, by relative path) into ``remote_dir``, renewing ``lease`` before each. Returns the
    transfer record: bytes, seconds, the files sent and the files reused."""
    say = on_step or (lambda step, msg: None)
    todo = [rel for rel in sorted(files) if held.get(rel) != local[rel]]
    transfer = {"uploaded_bytes": 0, "seconds": 0.0, "files": [],
                "reused": [rel for rel in sorted(files) if rel not in todo],
                "bytes_reused": sum(files[rel].stat().st_size for rel in files if rel not in todo)}
    if not todo:
        say("upload", "nothing to upload: the device holds every file")
        return transfer
    start = time.monotonic()
    for rel in todo:
        why = "changed on the device" if held.get(rel) else "new"
        say("upload", f"{rel} ({why}, {files[rel].stat().st_size} bytes)")
        if lease is not None:
            lease.renew()
        transfer["uploaded_bytes"] += tr.upload(files[rel], posixpath.join(remote_dir, rel), timeout=timeout_s)
        transfer["files"].append(rel)
    transfer["seconds"] = round(time.monotonic() - start, 4)
    transfer["bytes_by_file"] = {rel: files[rel].stat().st_size for rel in todo}
    say("upload", f"{len(todo)} file(s), {transfer['uploaded_bytes']} bytes in {transfer['seconds']:.2f}s")
    return transfer


def keep_by_digest(tr: SSHTransport, manifest: dict, settings: BenchSettings, digests: dict[str, str],
                   subdir: str, sent: list[str]) -> None:
    """After an upload: the files ``sent`` also into the device's store by digest, so that the
    next bench of another build that ships them (the reference data of another precision of the
    same model) links them instead of uploading them. A failure only costs that upload later."""
    if not sent:
        return
    try:
        prepare(tr, manifest, settings, {rel: digests[rel] for rel in sent}, subdir, modules=False)
    except (ConfigError, Misconfigured, RuntimeMissing, RunnerCrashed, RunnerTimeout):
        pass
