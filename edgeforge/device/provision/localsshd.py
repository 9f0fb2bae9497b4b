"""A local device: OpenSSH's sshd on 127.0.0.1 with generated keys and a private workdir.

    python -m edgeforge.device.provision.localsshd start --dir .demo/device [--name local] [--target linux-x86]
    python -m edgeforge.device.provision.localsshd stop --dir .demo/device
    python -m edgeforge.device.provision.localsshd status --dir .demo/device

``start`` writes into DIR: ``host_ed25519_key`` (the server's key), ``client_ed25519_key`` (ours),
``authorized_keys``, ``known_hosts`` (pre-filled with the host key), ``sshd_config``,
``sshd.pid``, ``sshd.log``, ``workdir/`` and ``devices.toml`` with one device. The python on the
device (:func:`device_python`) must run both Lite and ONNX builds: the Paddle Lite toolchain's
interpreter when it has onnxruntime too (a managed toolchain does), else this one. Tests use
:class:`LocalSshd` directly.
"""
from __future__ import annotations

import argparse
import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ...errors import ConfigError, DeviceError, EdgeforgeError
from ..link.inventory import Device, render_device_toml
from ..link.process import pid_alive

SSHD = os.environ.get("EDGEFORGE_SSHD", "/usr/sbin/sshd")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    exe = shutil.which("ssh-keygen")
    if exe is None:
        raise ConfigError("ssh-keygen not found", hint="install openssh-client (apt-get install -y openssh-client)")
    subprocess.run([exe, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid``, from /proc (sshd forks one process per connection)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def device_python() -> str:
    """An interpreter with numpy, onnxruntime and (where installed) paddlelite for the runner."""
    from ...toolchain import find_lite

    tc = find_lite()
    if tc is not None and tc.onnxruntime and tc.numpy:
        return tc.python
    return sys.executable


def sshd_config(writer: str, port: int, host_key, authorized_keys, pid_file, extra: tuple[str, ...] = ()) -> str:
    """An sshd_config for a loopback device: key-only, no PAM, ``extra`` lines before the logging."""
    return "\n".join([
        f"# written by {writer}",
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {host_key}",
        f"AuthorizedKeysFile {authorized_keys}",
        f"PidFile {pid_file}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "UsePAM no",
        "StrictModes no",
        "PrintMotd no",
        "PrintLastLog no",
        "AllowTcpForwarding no",
        "X11Forwarding no",
        "MaxStartups 50:30:100",
        "MaxSessions 50",
        *extra,
        "LogLevel VERBOSE",
        "Subsystem sftp internal-sftp",
        "",
    ])


def wait_for_banner(port: int, timeout: float, ready=lambda: True, read_timeout: float = 1.0) -> bool:
    """True once 127.0.0.1:``port`` greets with ``SSH-`` (polled while ``ready()``), False after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
                    s.settimeout(read_timeout)
                    if s.recv(4).startswith(b"SSH-"):
                        return True
            except OSError:
                pass
        time.sleep(0.05)
    return False


class LocalSshd:
    """sshd on 127.0.0.1:PORT, configured from files in ``root``."""

    def __init__(self, root: str | os.PathLike, *, name: str = "local", target: str = "linux-x86",
                 python: str | None = None, port: int | None = None):
        self.root = Path(root).resolve()
        self.name = name
        self.target = target
        self.python = python or device_python()
        self.port = port
        self.host_key = self.root / "host_ed25519_key"
        self.client_key = self.root / "client_ed25519_key"
        self.authorized_keys = self.root / "authorized_keys"
        self.known_hosts = self.root / "known_hosts"
        self.config = self.root / "sshd_config"
        self.pid_file = self.root / "sshd.pid"
        self.log_file = self.root / "sshd.log"
        self.workdir = self.root / "workdir"
        self.inventory = self.root / "devices.toml"

    # ------------------------------------------------------------ set-up

    def device(self, **overrides) -> Device:
        data = dict(name=self.name, host="127.0.0.1", port=self.port, user=getpass.getuser(),
                    identity=str(self.client_key), known_hosts=str(self.known_hosts), target=self.target,
                    python=self.python, workdir=str(self.workdir), tags=["local", "loopback"])
        data.update(overrides)
        return Device(**data)

    def write_inventory(self, path: Path | None = None, devices: list[Device] | None = None) -> Path:
        path = Path(path or self.inventory)
        text = "# written by python -m edgeforge.device.provision.localsshd\n\n"
        text += "\n".join(render_device_toml(d) for d in (devices or [self.device()]))
        path.write_text(text)
        return path

    def host_key_line(self) -> str:
        kind, b64 = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"[127.0.0.1]:{self.port} {kind} {b64}\n"

    def _prepare(self) -> None:
        if not Path(SSHD).is_file():
            raise ConfigError(f"sshd not found at {SSHD}",
                              hint="install it (apt-get install -y openssh-server) or set EDGEFORGE_SSHD")
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        self.workdir.mkdir(exist_ok=True)
        keygen(self.host_key, "edgeforge-localsshd-host")
        keygen(self.client_key, "edgeforge-localsshd-client")
        self.authorized_keys.write_text(self.client_key.with_suffix(".pub").read_text())
        os.chmod(self.authorized_keys, 0o600)
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)   # privilege separation directory

    def _write_config(self) -> None:
        self.config.write_text(sshd_config("python -m edgeforge.device.provision.localsshd", self.port, self.host_key,
                                           self.authorized_keys, self.pid_file))


    # ------------------------------------------------------------ run

    @property
    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def running(self) -> bool:
        pid = self.pid
        return pid is not None and pid_alive(pid)

    def start(self, timeout: float = 10.0) -> "LocalSshd":
        if self.running():
            raise ConfigError(f"sshd already running from {self.root} (pid {self.pid})",
                              hint=f"python -m edgeforge.device.provision.localsshd stop --dir {self.root}")
        self._prepare()
        last = ""
        for _ in range(5):   # a free port can be taken between the probe and sshd's bind
            self.port = self.port or free_port()
            self.pid_file.unlink(missing_ok=True)
            self._write_config()
            check = subprocess.run([SSHD, "-t", "-f", str(self.config)], capture_output=True, text=True)
            if check.returncode != 0:
                raise ConfigError(f"sshd rejects {self.config}: {check.stderr.strip().splitlines()[-1:]}")
            proc = subprocess.run([SSHD, "-f", str(self.config), "-E", str(self.log_file)],
                                  capture_output=True, text=True)
            if proc.returncode == 0 and self._wait_listening(timeout):
                self.known_hosts.write_text(self.host_key_line())
                self.write_inventory()
                return self
            last = (proc.stderr.strip() or self._log_tail()).splitlines()[-1:] or ["no output"]
            self.stop()
            self.port = None
        raise DeviceError(self.name, f"local sshd did not start: {last[0]}", hint=f"see {self.log_file}")

    def _log_tail(self) -> str:
        try:
            return self.log_file.read_text()
        except OSError:
            return ""

    def _wait_listening(self, timeout: float) -> bool:
        return wait_for_banner(self.port, timeout, ready=lambda: self.pid is not None)

    def stop(self, connections: bool = True) -> None:
        """Stop the listener and (by default) every connection it serves."""
        pid = self.pid
        if pid is None or not pid_alive(pid):
            self.pid_file.unlink(missing_ok=True)
            return
        kids = children_of(pid) if connections else []
        for p in [pid, *kids]:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.05)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)

    def kill_all(self) -> list[int]:
        """SIGKILL the listener and every per-connection sshd: what a crash or a pulled cable does."""
        pid = self.pid
        if pid is None:
            return []
        victims = [pid]
        frontier = [pid]
        while frontier:
            nxt = []
            for p in frontier:
                for c in children_of(p):
                    if Path(f"/proc/{c}/exe").exists() and os.path.realpath(f"/proc/{c}/exe") == os.path.realpath(SSHD):
                        nxt.append(c)
            victims += nxt
            frontier = nxt
        for p in victims:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return victims


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m edgeforge.device.provision.localsshd",
                                 description="A local edgeforge device: sshd on 127.0.0.1 with generated keys.")
    ap.add_argument("action", choices=["start", "stop", "status"])
    ap.add_argument("--dir", default=".demo/device", help="where keys, config, logs and the workdir go")
    ap.add_argument("--name", default="local", help="device name in devices.toml")
    ap.add_argument("--target", default="linux-x86")
    ap.add_argument("--port", type=int)
    args = ap.parse_args(argv)
    sshd = LocalSshd(args.dir, name=args.name, target=args.target, port=args.port)
    try:
        if args.action == "start":
            sshd.start()
            print(f"local device '{args.name}' on 127.0.0.1:{sshd.port} (sshd pid {sshd.pid}); "
                  f"inventory {sshd.inventory}")
            print(f"  EDGEFORGE_DEVICES={sshd.inventory} edgeforge devices check {args.name}")
        elif args.action == "stop":
            was = sshd.pid
            sshd.stop()
            print(f"stopped sshd (pid {was})" if was else f"no sshd running from {sshd.root}")
        else:
            print(f"running, pid {sshd.pid}" if sshd.running() else "not running")
            return 0 if sshd.running() else 1
    except EdgeforgeError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
