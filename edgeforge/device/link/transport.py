"""SSH transport to one device, over fabric (paramiko underneath).

- Host keys are checked against the device's ``known_hosts`` (or ``UserKnownHostsFile`` from
  ``~/.ssh/config``, or ``~/.ssh/known_hosts``). An unknown host is refused unless the caller
  trusts new hosts, which records the key there. A changed key is always refused.
- Every remote command is built from an argument list, each argument shell-quoted, and run under
  ``sh -c`` so that a signal that kills the command reads back as ``128 + signal``.
- Every fabric/paramiko/socket exception leaves this module as a one-line :class:`DeviceError`.
"""
from __future__ import annotations

import base64
import hashlib
import io
import logging
import math
import os
import secrets
import shlex
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ...errors import (AuthFailed, ConfigError, ConnectionLost, DeviceError, HostKeyRejected,
                      NameNotResolved, SSHFailed, Unreachable)
from .inventory import Device

KEEPALIVE_S = 5

# paramiko logs transport errors (e.g. "Error reading SSH protocol banner") that we report
# ourselves, in one line; without a handler, logging's last resort would print them to stderr.
# Nor should its INFO lines reach a root logger someone else configured (paddle does, on import:
# `edgeforge run`/`sweep` build first, then bench, and printed "Authentication ... successful!").
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False


def quote_command(argv: Sequence[str], cwd: str | None = None) -> str:
    """The command line sent to the device: ``sh -c '<cd DIR &&> ARGV...; exit $?'``.

    ``exit $?`` keeps ``sh`` from exec'ing the command, so a command killed by a signal reads
    back as exit status 128+N instead of a channel without one.
    """
    inner = shlex.join([str(a) for a in argv])
    if cwd is not None:
        inner = f"cd {shlex.quote(str(cwd))} && {inner}"
    return "sh -c " + shlex.quote(f"{inner}; exit $?")


def key_fingerprint(key) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


class UnknownHostKey(Exception):
    def __init__(self, hostname: str, key):
        self.hostname = hostname
        self.key = key
        super().__init__(f"unknown host key for {hostname}")


def _make_policy(trust_new_host: bool, known_hosts: Path, recorded: list):
    from paramiko import MissingHostKeyPolicy

    class _Policy(MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):
            if not trust_new_host:
                raise UnknownHostKey(hostname, key)
            known_hosts.parent.mkdir(parents=True, exist_ok=True)
            line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
            fd = os.open(known_hosts, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a") as fh:
                fh.write(line)
            client.get_host_keys().add(hostname, key.get_name(), key)
            recorded.append((hostname, key_fingerprint(key)))

    return _Policy()


@dataclass
class RemoteResult:
    exit_code: int            # -1: no exit status came back (connection lost, or timed out)
    stdout: str
    stderr: str
    timed_out: bool = False
    connection_lost: bool = False
    seconds: float = 0.0

    @property
    def signal(self) -> int | None:
        return self.exit_code - 128 if 128 < self.exit_code < 128 + 65 else None


class _LineSink(io.TextIOBase):
    """A stream invoke writes output to; calls ``on_line`` for every complete line."""

    def __init__(self, on_line: Callable[[str], None] | None):
        self.on_line = on_line
        self.buf = ""

    def writable(self):
        return True

    def write(self, s):
        if self.on_line is None:
            return len(s)
        self.buf += s
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            try:
                self.on_line(line)
            except Exception:  # noqa: BLE001 - a progress callback never breaks a run
                pass
        return len(s)

    def flush(self):
        pass


class SSHTransport:
    """One SSH connection to one device. Use as a context manager."""

    def __init__(self, device: Device, *, connect_timeout: float = 10.0, trust_new_host: bool = False):
        self.device = device
        self.connect_timeout = float(connect_timeout)
        self.trust_new_host = trust_new_host
        self.recorded_host_keys: list[tuple[str, str]] = []
        self.conn = None
        self._sftp = None
        self.known_hosts: Path | None = None

    # ------------------------------------------------------------ errors

    def error(self, cls: type[DeviceError], message: str, hint: str | None = None) -> DeviceError:
        return cls(self.device.name, message, hint=hint)

    @property
    def where(self) -> str:
        if self.conn is not None:
            return f"{self.conn.user}@{self.conn.host}:{self.conn.port}"
        return self.device.address

    def map_exception(self, exc: BaseException, doing: str) -> DeviceError:
        """Turn a fabric/paramiko/socket/invoke exception into a one-line DeviceError."""
        import paramiko
        from invoke.exceptions import ThreadException

        if isinstance(exc, DeviceError):
            return exc
        if isinstance(exc, UnknownHostKey):
            return self.error(
                HostKeyRejected, f"unknown host key {exc.key.get_name()} {key_fingerprint(exc.key)} for {exc.hostname}, "
                f"not in {self.known_hosts}",
                hint="check the fingerprint on the device (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), "
                     "then re-run with --trust-new-host to record it")
        if isinstance(exc, paramiko.BadHostKeyException):
            return self.error(
                HostKeyRejected, f"host key for {exc.hostname} has changed: known_hosts has {key_fingerprint(exc.expected_key)}, "
                f"the device offered {key_fingerprint(exc.key)}",
                hint=f"if the device was re-installed, remove its line from {self.known_hosts}; "
                     "otherwise someone may be intercepting the connection")
        if isinstance(exc, paramiko.AuthenticationException):
            ident = f" with {self.device.identity}" if self.device.identity else ""
            return self.error(AuthFailed, f"authentication failed for {self.where}{ident} ({exc})",
                              hint="check user and identity in devices.toml and the device's authorized_keys")
        if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
            reasons = sorted({(e.strerror or str(e)).lower() for e in exc.errors.values()})
            return self.error(Unreachable, f"cannot reach {self.where}: {'; '.join(reasons) or 'no address answered'}",
                              hint="is the device on and sshd listening on that port?")
        if isinstance(exc, socket.gaierror):
            return self.error(NameNotResolved, f"cannot resolve host '{self.device.host}' ({exc.strerror or exc})")
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return self.error(Unreachable, f"cannot reach {self.where}: no answer within {self.connect_timeout:g}s while {doing}",
                              hint="is the device on the network? raise --connect-timeout if it is slow")
        if isinstance(exc, ConnectionRefusedError):
            return self.error(Unreachable, f"cannot reach {self.where}: connection refused")
        if isinstance(exc, (EOFError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
            return self.error(ConnectionLost, f"connection to {self.where} lost while {doing}")
        if isinstance(exc, ThreadException):
            inner = exc.exceptions[0].value if exc.exceptions else exc
            return self.map_exception(inner, doing)
        if isinstance(exc, paramiko.SSHException):
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if doing == "connecting":
                low = text.lower()
                if "banner" in low or "no existing session" in low:
                    return self.error(Unreachable, f"cannot reach {self.where}: no SSH handshake within "
                                      f"{self.connect_timeout:g}s ({text})",
                                      hint="is sshd (and not something else) listening on that port?")
                # a handshake cut short (reset, EOF) may pass; another broken handshake will not
                cls = Unreachable if "reset" in low or "eof" in low else SSHFailed
                return self.error(cls, f"cannot reach {self.where}: SSH handshake failed ({text})")
            if not self.is_connected():
                return self.error(ConnectionLost, f"connection to {self.where} lost while {doing} ({text})")
            return self.error(SSHFailed, f"SSH failed while {doing}: {text}")
        if isinstance(exc, OSError):
            from ...oserror import os_error_text

            return self.error(SSHFailed, f"{doing} failed on {self.where}: {os_error_text(exc)}")
        return self.error(SSHFailed, f"{doing} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    # ------------------------------------------------------------ connection

    def is_connected(self) -> bool:
        t = getattr(self.conn, "transport", None) if self.conn is not None else None
        return bool(t is not None and t.is_active())

    def open(self) -> "SSHTransport":
        from fabric import Connection

        dev = self.device
        connect_kwargs: dict = {"banner_timeout": self.connect_timeout, "auth_timeout": self.connect_timeout,
                                "channel_timeout": self.connect_timeout}
        if dev.identity:
            key = os.path.expanduser(dev.identity)
            if not os.path.isfile(key):     # the inventory's fault, not the device's: exit 2
                raise ConfigError(f"device {dev.name}: identity {key}: no such file",
                                  hint="fix identity in the device inventory")
            connect_kwargs.update(key_filename=[key], look_for_keys=False, allow_agent=False)
        try:
            conn = Connection(dev.host, user=dev.user, port=dev.port,
                              connect_timeout=max(1, math.ceil(self.connect_timeout)),
                              connect_kwargs=connect_kwargs)
        except Exception as exc:  # noqa: BLE001 - a bad ~/.ssh/config, ...
            raise self.error(SSHFailed, f"cannot set up SSH to {dev.address}: {exc}") from None
        self.conn = conn
        kh = dev.known_hosts or (conn.ssh_config.get("userknownhostsfile") or "").split(" ")[0] or "~/.ssh/known_hosts"
        self.known_hosts = Path(os.path.expanduser(kh))
        client = conn.client
        try:
            if os.path.isfile("/etc/ssh/ssh_known_hosts"):
                client.load_system_host_keys("/etc/ssh/ssh_known_hosts")
            if self.known_hosts.is_file():
                client.get_host_keys().load(str(self.known_hosts))
        except (OSError, ValueError) as exc:
            raise self.error(HostKeyRejected, f"cannot read known_hosts {self.known_hosts}: {exc}") from None
        client.set_missing_host_key_policy(_make_policy(self.trust_new_host, self.known_hosts,
                                                        self.recorded_host_keys))
        try:
            conn.open()
            conn.transport.set_keepalive(KEEPALIVE_S)
        except BaseException as exc:  # mapped at the boundary
            self.close()
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise self.map_exception(exc, "connecting") from None
        return self

    def close(self) -> None:
        try:
            if self._sftp is not None:
                self._sftp.close()
        except Exception:  # noqa: BLE001
            pass
        self._sftp = None
        try:
            if self.conn is not None:
                self.conn.close()
        except Exception:  # noqa: BLE001
            pass

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()
        return False

    # ------------------------------------------------------------ commands

    def run(self, argv: Sequence[str], *, timeout: float | None, cwd: str | None = None, stdin: str | None = None,
            on_line: Callable[[str], None] | None = None, doing: str = "running a command") -> RemoteResult:
        """Run ``argv`` on the device. Never raises for a non-zero exit or a timeout (see the
        result); raises DeviceError when the connection fails."""
        from invoke.exceptions import CommandTimedOut

        command = quote_command(argv, cwd)
        out, err = _LineSink(on_line), _LineSink(None)
        start = time.monotonic()
        try:
            res = self.conn.run(command, hide=False, warn=True, pty=False, echo=False,
                                timeout=int(math.ceil(timeout)) if timeout else None,
                                in_stream=io.StringIO(stdin) if stdin is not None else False,
                                out_stream=out, err_stream=err)
        except CommandTimedOut as exc:
            r = exc.result
            return RemoteResult(-1, r.stdout, r.stderr, timed_out=True, seconds=time.monotonic() - start,
                                connection_lost=not self.is_connected())
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise self.map_exception(exc, doing) from None
        lost = res.exited == -1 and not self.is_connected()
        return RemoteResult(res.exited, res.stdout, res.stderr, connection_lost=lost,
                            seconds=time.monotonic() - start)

    def python(self, args: Sequence[str], **kw) -> RemoteResult:
        return self.run([self.device.python, *args], **kw)

    # ------------------------------------------------------------ files

    def sftp(self):
        if self._sftp is None:
            try:
                self._sftp = self.conn.sftp()
            except BaseException as exc:
                if isinstance(exc, KeyboardInterrupt):
                    raise
                raise self.map_exception(exc, "opening SFTP") from None
        return self._sftp

    def upload(self, local: Path, remote: str, *, timeout: float | None = None) -> int:
        """Copy ``local`` to ``remote`` atomically (a temporary name, then a rename). Returns bytes."""
        import posixpath

        sftp = self.sftp()
        if timeout:
            sftp.get_channel().settimeout(timeout)
        tmp = posixpath.join(posixpath.dirname(remote), f".{posixpath.basename(remote)}.part-{secrets.token_hex(4)}")
        try:
            sftp.put(str(local), tmp, confirm=True)
            try:
                sftp.posix_rename(tmp, remote)
            except OSError:
                if not self.is_connected():
                    raise
                # No posix-rename@openssh.com extension: plain SFTP rename refuses to replace.
                try:
                    sftp.remove(remote)
                except OSError:
                    pass
                sftp.rename(tmp, remote)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            try:
                if self.is_connected():
                    sftp.remove(tmp)
            except Exception:  # noqa: BLE001
                pass
            raise self.map_exception(exc, f"uploading {Path(local).name}") from None
        return Path(local).stat().st_size
