"""The error tree. It follows what the caller can do next, and maps to exit codes.

The exit codes are declared once, in :class:`ExitCode`; each error class names its own, and
``edgeforge.cli.main`` is the one place that turns an exception into one.
"""
from __future__ import annotations

from enum import IntEnum
from typing import ClassVar


class ExitCode(IntEnum):
    OK = 0              # success
    GATE = 1            # a quality gate failed (or a build failed verify)
    USAGE = 2           # usage or configuration: fix the input
    PASS = 3            # a build pass failed
    DEVICE = 4          # a device failed
    INTERNAL = 70       # a bug in edgeforge (EX_SOFTWARE): report it
    INTERRUPTED = 130   # SIGINT (Ctrl-C), SIGTERM or SIGHUP: 128 + SIGINT for all three


class EdgeforgeError(Exception):
    """Base of every error edgeforge raises on purpose. ``str(err)`` is one line for the user."""

    exit_code = ExitCode.PASS

    def __init__(self, message: str, *, hint: str | None = None):
        self.message = " ".join(str(message).split())
        self.hint = " ".join(hint.split()) if hint else None
        super().__init__(self.one_line())

    def one_line(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message


class ConfigError(EdgeforgeError):
    """Bad input from the user: a project, a target, a flag, an inventory. Fix the input."""

    exit_code = ExitCode.USAGE


class BuildInvalid(ConfigError):
    """The build directory cannot be shipped as it is: its manifest or files fail validation
    (checked before connecting), or the runner on the device refused them (an input name the
    model or the reference data lacks, a reference file that does not fit). Rebuild it. The
    device is not at fault: this never counts against its health, and is never retried."""


class PassError(EdgeforgeError):
    """A build pass failed. ``pass_name`` names it."""

    exit_code = ExitCode.PASS

    def __init__(self, pass_name: str, message: str, *, hint: str | None = None):
        self.pass_name = pass_name
        super().__init__(f"pass {pass_name}: {message}", hint=hint)


class ConverterCrash(PassError):
    """A native converter killed its own process (segfault, abort)."""


class DeviceError(EdgeforgeError):
    """A device failed us. ``device`` names it; ``detail`` is the cause without the name.

    The subclass says what the caller can do next. ``transient``: the failure may pass on its
    own, so a connect is tried again (by class, never by reading the message).
    ``counts_against_health``: whether the device's health record counts it as a failure.
    """

    exit_code = ExitCode.DEVICE
    transient: ClassVar[bool] = False
    counts_against_health: ClassVar[bool] = True

    def __init__(self, device: str, detail: str, *, hint: str | None = None):
        self.device = device
        self.detail = " ".join(str(detail).split())
        super().__init__(f"device {device}: {self.detail}", hint=hint)

    def restate(self, detail: str | None = None, *, hint: str | None = None) -> "DeviceError":
        """The same cause on the same device, in other words (``hint`` replaces the old one)."""
        return type(self)(self.device, self.detail if detail is None else detail,
                          hint=self.hint if hint is None else hint)


class Unreachable(DeviceError):
    """Refused, timed out, no SSH handshake yet: may pass, so connects are tried again."""

    transient = True


class ConnectionLost(DeviceError):
    """The connection dropped (reset, EOF) while connecting or mid-run: may pass."""

    transient = True


class NameNotResolved(DeviceError):
    """The device's host name does not resolve: fix devices.toml or DNS."""


class AuthFailed(DeviceError):
    """The device refused our user or key: fix user/identity or authorized_keys."""


class HostKeyRejected(DeviceError):
    """The host key is unknown (``--trust-new-host`` records it) or changed (check why)."""


class SSHFailed(DeviceError):
    """Another SSH-level failure (a handshake or channel that broke for a reason not above)."""


class RunnerTimeout(DeviceError):
    """The runner (or another program edgeforge runs there) did not finish in time: raise
    ``--timeout`` or lower ``--runs``."""


class RunnerCrashed(DeviceError):
    """The runner (or another program edgeforge runs there) died or exited with an error."""


class RuntimeMissing(DeviceError):
    """The device lacks what the run needs: its python, numpy, or the runtime (install it,
    or point ``python = ...`` in devices.toml at one that has it)."""


class DigestMismatch(DeviceError):
    """Files on the device do not match their sha256 (changed after upload): re-run."""


class Misconfigured(DeviceError):
    """The device answers but is not what devices.toml says: another architecture or target,
    or a workdir the user cannot write."""


class Busy(DeviceError):
    """Another bench holds the device's lease: ``--wait`` for it. Not a failure of the device."""

    counts_against_health = False


class LeaseLost(DeviceError):
    """Another bench broke our lease as stale mid-run: raise ``--timeout`` so the lease's TTL
    covers the bench."""


class Unhealthy(DeviceError):
    """The device is marked unhealthy after failed benches; ``edgeforge devices check NAME``
    clears the mark."""

    counts_against_health = False


class RootfsFailed(EdgeforgeError):
    """The emulated device's root filesystem could not be built, unpacked or unmounted
    (debootstrap, pip into the rootfs, tar, umount): the device cannot be made. The message
    names the step and the log to read."""

    exit_code = ExitCode.DEVICE


class GateFailed(EdgeforgeError):
    """A quality gate (accuracy, latency, speed-up) did not hold. ``gates``: the failed ones."""

    exit_code = ExitCode.GATE

    def __init__(self, message: str, *, gates=(), hint: str | None = None):
        self.gates = list(gates)
        super().__init__(message, hint=hint)


class FleetFailed(EdgeforgeError):
    """Devices of a fleet (a fleet bench, a deploy, a rollback) failed, each a value in the
    outcome or the record, which is kept: what the caller can do next is that of the worst
    device. ``exit_code``: 4 when a device failed (the default); a deploy record's own (130
    interrupted, 70 a bug, 4, 2 refused, 1 smoke or gate), given by the record."""

    exit_code = ExitCode.DEVICE

    def __init__(self, message: str, *, exit_code: int = ExitCode.DEVICE, hint: str | None = None):
        self.exit_code = ExitCode(exit_code)
        super().__init__(message, hint=hint)


# ---------------------------------------------------------------- deploy (device/release/deploy.py)

class ReleaseRefused(DeviceError):
    """The device refused a change to its releases: the release is incomplete or missing, or
    ``current`` moved under us (another deploy)."""


class HealthCheckFailed(DeviceError):
    """The health check through ``current`` failed after a switch; edgeforge switched back."""


class SmokeFailed(GateFailed):
    """The release's drift on the device is over the build's budget (exit 1): not switched in."""

    def __init__(self, device: str, detail: str, *, hint: str | None = None):
        self.device, self.detail = device, detail
        super().__init__(f"device {device}: {detail}", hint=hint)


class Interrupted(EdgeforgeError):
    """SIGINT (Ctrl-C), SIGTERM or SIGHUP stopped the command; what was measured so far is kept
    (the hint says where). Exit 130, as for a KeyboardInterrupt."""

    exit_code = ExitCode.INTERRUPTED


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP outside a device run (``edgeforge.cli.main`` installs the handler): it
    takes KeyboardInterrupt's path, so every ``finally`` runs and the exit is 130 with one line.
    ``signum``: the signal."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(signal_name(self.signum))


def signal_name(signum: int) -> str:
    """``SIGTERM``, ``SIGINT`` ...; ``signal 99`` for one without a name."""
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class ResultError(ConfigError):
    """A result file that cannot be read: unknown schema, missing fields."""
