"""An emulated aarch64 device: a Debian arm64 userland under qemu-user, with its own sshd on loopback.

    edgeforge devices emulate start --dir DIR [--cpu cortex-a72|cortex-a76] [--target rpi4] [--port N]
    edgeforge devices emulate stop --dir DIR

``start`` builds the rootfs once (:mod:`edgeforge.device.provision.rootfs`; on a bare 2-core machine 14.5 min
for the first ``start --setup``, 768 s of it debootstrap's second stage; then cached) and
unpacks it into ``DIR/rootfs``; mounts /proc, /sys and /dev inside it (onnxruntime aborts without
them); starts the rootfs's own sshd in a chroot on 127.0.0.1 (key-only, no PAM) with ``QEMU_CPU``
set, and writes ``DIR/devices.toml`` with one device, ``emu-arm64``, plus its keys and known_hosts.

Every aarch64 program runs through binfmt_misc's qemu-aarch64 (F flag). qemu reads ``QEMU_CPU``
from the environment of the program it runs, so sshd's ``SetEnv`` hands it, with
``EDGEFORGE_EMULATED=qemu-user``, to every session: the runner records both in its fingerprint, and
reports, compare and the latency gates treat such timings as not performance figures.

``stop`` ends every process whose root is the rootfs and unmounts what ``start`` mounted. The
unpacked rootfs stays (a second start reuses it, with what ``devices setup`` installed there);
``stop --purge`` deletes it. binfmt_misc's qemu-aarch64 entry is system-wide and stays registered.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ...errors import ConfigError, DeviceError
from . import rootfs as rfs
from ..link.inventory import Device, render_device_toml
from .localsshd import keygen, free_port, sshd_config, wait_for_banner

NAME = "emu-arm64"
CPUS = ("cortex-a72", "cortex-a76", "cortex-a53", "cortex-a55", "cortex-a57", "neoverse-n1", "max")
CPU_FOR_TARGET = {"rpi4": "cortex-a72", "rpi5": "cortex-a76", "jetson-orin": "cortex-a76",
                  "jetson-nano": "cortex-a57", "android-arm64": "cortex-a76"}
WORKDIR = "/root/edgeforge"            # on the device, i.e. DIR/rootfs/root/edgeforge here
CONF_DIR = "/etc/edgeforge"             # sshd's config, host key and authorized_keys, in the rootfs
SSHD_PID = "/run/edgeforge-sshd.pid"
SSHD_LOG = "/var/log/edgeforge-sshd.log"
EMULATED = "qemu-user"
INVENTORY_MARK = "# written by edgeforge devices emulate start"
# what start writes in --dir (the only names it may find there)
OURS = frozenset({"rootfs", "client_ed25519_key", "client_ed25519_key.pub", "known_hosts", "devices.toml",
                  "emulate.json"})


@dataclass
class State:
    """``DIR/emulate.json``: what ``start`` did, so ``stop`` can undo it."""

    port: int
    cpu: str
    target: str
    rootfs: str
    mounts: list[str]
    pid: int | None = None
    started_at: float = 0.0
    timings: dict | None = None


class Emulator:
    """One emulated aarch64 device rooted at ``dir``."""

    def __init__(self, dir: str | os.PathLike, *, cpu: str | None = None, target: str = "rpi4",
                 port: int | None = None, name: str = NAME, recipe: rfs.Recipe | None = None,
                 cache: str | os.PathLike | None = None):
        self.root = Path(dir).resolve()
        self.target = target
        self.cpu = cpu or CPU_FOR_TARGET.get(target, "cortex-a72")
        if self.cpu not in CPUS:
            raise ConfigError(f"unknown --cpu '{self.cpu}'", hint=f"one of {', '.join(CPUS)}")
        self.port = port
        self.name = name
        self.recipe = recipe or rfs.Recipe()
        self.cache = Path(cache) if cache else None       # where the rootfs tarball is (default: edgeforge's)
        self.rootfs = self.root / "rootfs"
        self.client_key = self.root / "client_ed25519_key"
        self.known_hosts = self.root / "known_hosts"
        self.inventory = self.root / "devices.toml"
        self.state_file = self.root / "emulate.json"

    def path(self, device_path: str) -> Path:
        """Where a path on the device lies on this host."""
        return self.rootfs / device_path.lstrip("/")

    # ------------------------------------------------------------ state

    def state(self) -> State | None:
        try:
            return State(**json.loads(self.state_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def processes(self) -> list[int]:
        """Every process whose root directory is this rootfs (sshd and all it started)."""
        want = str(self.rootfs)
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/root") == want:
                        out.append(int(entry))
                except OSError:
                    continue
        return out

    def running(self) -> bool:
        return bool(self.processes())

    def device(self) -> Device:
        return Device(name=self.name, host="127.0.0.1", port=self.port, user="root",
                      identity=str(self.client_key), known_hosts=str(self.known_hosts), target=self.target,
                      python="/usr/bin/python3", workdir=WORKDIR, tags=["emulated", "qemu", "arm64", self.cpu])

    # ------------------------------------------------------------ start

    def check_dir(self) -> None:
        """``--dir`` holds nothing but what ``start`` writes (ConfigError otherwise): start
        replaces its devices.toml and keys and makes the directory 0700, so a folder of the
        user's is refused before anything is touched, as ``build --out`` refuses one."""
        from ...fsutil import check_ours

        if self.root.is_symlink() or (self.root.exists() and not self.root.is_dir()):
            raise ConfigError(f"--dir {self.root} exists and is not a directory",
                              hint="edgeforge replaces only its own output: choose another path")
        if not self.root.is_dir():
            return
        theirs = sorted(e.name for e in self.root.iterdir() if e.name not in OURS)
        if theirs:
            raise ConfigError(f"--dir {self.root} holds files edgeforge did not write ({', '.join(theirs[:3])})",
                              hint="edgeforge replaces only its own output: choose another path or remove it yourself")
        check_ours(self.inventory, "--dir", (INVENTORY_MARK.encode(),), "an emulated device's devices.toml")

    def start(self, timeout: float = 90.0) -> State:
        self.check_dir()
        rfs.require_root("edgeforge devices emulate start")
        rfs.ensure_binfmt()
        if self.running():
            raise ConfigError(f"the emulated device in {self.root} is already running",
                              hint=f"edgeforge devices emulate stop --dir {self.root}")
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        timings: dict[str, float] = {}
        report = rfs.build(self.recipe, self.cache)
        timings.update({f"build_{k}": round(v, 1) for k, v in report.seconds.items()})
        timings["unpack"] = round(self._ensure_rootfs(report.tarball), 1)
        self._prepare_ssh()
        mounts: list[str] = []
        try:
            self._mount(mounts)
            t0 = time.monotonic()
            state = self._start_sshd(mounts, timeout)
            timings["sshd"] = round(time.monotonic() - t0, 1)
        except BaseException:
            self._undo(mounts)
            raise
        state.timings = timings
        self.state_file.write_text(json.dumps(asdict(state), indent=1) + "\n")
        self.known_hosts.write_text(self._host_key_line())
        self.inventory.write_text(f"{INVENTORY_MARK}: an aarch64 Debian userland "
                                  f"under qemu-user ({self.cpu})\n"
                                  "# its timings are not performance figures; its numerics are aarch64's\n\n"
                                  + render_device_toml(self.device()))
        return state

    def _ensure_rootfs(self, tarball: Path) -> float:
        stamp = self.path("/etc/edgeforge-rootfs.json")
        if stamp.is_file():
            try:
                if json.loads(stamp.read_text()) == json.loads(json.dumps(asdict(self.recipe))):
                    return 0.0
            except ValueError:
                pass
        rfs.log(f"unpacking {tarball.name} into {self.rootfs}")
        rfs.remove_tree(self.rootfs)
        return rfs.unpack(tarball, self.rootfs)

    def _prepare_ssh(self) -> None:
        conf = self.path(CONF_DIR)
        conf.mkdir(parents=True, exist_ok=True)
        self.path("/run/sshd").mkdir(parents=True, exist_ok=True)
        self.path(WORKDIR).mkdir(parents=True, exist_ok=True)
        keygen(conf / "ssh_host_ed25519_key", "edgeforge-emulate-host")
        keygen(self.client_key, "edgeforge-emulate-client")
        auth = conf / "authorized_keys"
        auth.write_text(self.client_key.with_suffix(".pub").read_text())
        os.chmod(auth, 0o600)

    def _mount(self, mounts: list[str]) -> None:
        """/proc fresh; /sys and /dev recursive binds made slaves, so unmounting them here never
        propagates to the host's own mounts."""
        plan = [("proc", ["-t", "proc", "proc"], False), ("sys", ["--rbind", "/sys"], True),
                ("dev", ["--rbind", "/dev"], True)]
        for sub, args, slave in plan:
            point = self.rootfs / sub
            point.mkdir(exist_ok=True)
            if str(point) in rfs.mounts_under(point):
                continue
            r = subprocess.run(["mount", *args, str(point)], capture_output=True, text=True)
            if r.returncode != 0:
                raise ConfigError(f"cannot mount /{sub} in {self.rootfs}: {r.stderr.strip()}",
                                  hint="the emulated device needs root and mount permission")
            mounts.append(str(point))
            if slave:
                subprocess.run(["mount", "--make-rslave", str(point)], check=True, capture_output=True)

    def _write_sshd_config(self, port: int) -> str:
        text = sshd_config("edgeforge devices emulate start", port, f"{CONF_DIR}/ssh_host_ed25519_key",
                           f"{CONF_DIR}/authorized_keys", SSHD_PID, extra=(
                               "LoginGraceTime 300",       # key exchange is slow under emulation
                               # every session's programs run under qemu: hand it the CPU model, and
                               # tell the runner it is emulated
                               f"SetEnv QEMU_CPU={self.cpu} EDGEFORGE_EMULATED={EMULATED}"))
        self.path(f"{CONF_DIR}/sshd_config").write_text(text)
        return f"{CONF_DIR}/sshd_config"

    def _chroot(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "QEMU_CPU": self.cpu, "EDGEFORGE_EMULATED": EMULATED,
               "LANG": "C.UTF-8"}
        return subprocess.run(["chroot", str(self.rootfs), *argv], env=env, capture_output=True, text=True, **kw)

    def _start_sshd(self, mounts: list[str], timeout: float) -> State:
        last = "no output"
        for _ in range(5):     # a free port can be taken between the probe and sshd's bind
            port = self.port or free_port()
            config = self._write_sshd_config(port)
            self.path(SSHD_PID).unlink(missing_ok=True)
            check = self._chroot(["/usr/sbin/sshd", "-t", "-f", config])
            if check.returncode != 0:
                raise ConfigError(f"sshd rejects {config}: {(check.stderr.strip().splitlines() or ['?'])[-1]}")
            r = self._chroot(["/usr/sbin/sshd", "-f", config, "-E", SSHD_LOG])
            if r.returncode == 0 and wait_for_banner(port, timeout, ready=lambda: self._sshd_pid() is not None,
                                                      read_timeout=10):
                self.port = port
                return State(port=port, cpu=self.cpu, target=self.target, rootfs=str(self.rootfs), mounts=mounts,
                             pid=self._sshd_pid(), started_at=time.time())
            last = (r.stderr.strip() or self._log_tail()).splitlines()[-1:] or [last]
            last = last[0]
            self._kill()
            if self.port:
                break
        raise DeviceError(self.name, f"the emulated sshd did not start: {last}",
                          hint=f"see {self.path(SSHD_LOG)}")

    def _sshd_pid(self) -> int | None:
        try:
            return int(self.path(SSHD_PID).read_text().strip())
        except (OSError, ValueError):
            return None

    def _log_tail(self) -> str:
        try:
            return self.path(SSHD_LOG).read_text()
        except OSError:
            return ""

    def _host_key_line(self) -> str:
        kind, b64 = self.path(f"{CONF_DIR}/ssh_host_ed25519_key.pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {b64}\n"

    # ------------------------------------------------------------ stop

    def _kill(self, grace: float = 5.0) -> list[int]:
        victims = self.processes()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.processes():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.05)
            if not self.processes():
                break
        left = self.processes()
        if left:
            raise DeviceError(self.name, f"processes in {self.rootfs} survived SIGKILL: {left}")
        return victims

    def _undo(self, mounts: list[str]) -> None:
        self._kill()
        rfs.unmount_all(self.rootfs)

    def stop(self, purge: bool = False) -> dict:
        """End every process in the rootfs, unmount everything under it; ``purge`` deletes it too."""
        rfs.require_root("edgeforge devices emulate stop")
        if not self.root.is_dir():
            raise ConfigError(f"no emulated device in {self.root}")
        mounted = rfs.mounts_under(self.rootfs) if self.rootfs.exists() else []
        killed = self._kill()
        rfs.unmount_all(self.rootfs)
        self.state_file.unlink(missing_ok=True)
        if purge:
            rfs.remove_tree(self.rootfs)
        return {"killed": killed, "unmounted": mounted, "purged": purge}
