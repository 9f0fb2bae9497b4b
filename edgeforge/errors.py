"""The error tree. It follows what the caller can do next, and maps to exit codes.

The exit codes are declared once, in :class:`ExitCode`; each error class names its own, and
``edgeforge.cli.main`` is the one place that turns an exception into one.
"""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0              # success
    GATE = 1            # a quality gate failed (or a build failed verify)
    USAGE = 2           # usage or configuration: fix the input
    PASS = 3            # a build pass failed
    DEVICE = 4          # a device failed
    INTERNAL = 70       # a bug in edgeforge (EX_SOFTWARE): report it
    INTERRUPTED = 130   # Ctrl-C (128 + SIGINT)


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


class PassError(EdgeforgeError):
    """A build pass failed. ``pass_name`` names it."""

    exit_code = ExitCode.PASS

    def __init__(self, pass_name: str, message: str, *, hint: str | None = None):
        self.pass_name = pass_name
        super().__init__(f"pass {pass_name}: {message}", hint=hint)


class ConverterCrash(PassError):
    """A native converter killed its own process (segfault, abort)."""


class DeviceError(EdgeforgeError):
    """A device could not be reached, refused us, lacks a runtime, or its runner failed."""

    exit_code = ExitCode.DEVICE

    def __init__(self, device: str, message: str, *, hint: str | None = None):
        self.device = device
        super().__init__(f"device {device}: {message}", hint=hint)


class GateFailed(EdgeforgeError):
    """A quality gate (accuracy, latency, speed-up) did not hold. ``gates``: the failed ones."""

    exit_code = ExitCode.GATE

    def __init__(self, message: str, *, gates=(), hint: str | None = None):
        self.gates = list(gates)
        super().__init__(message, hint=hint)


class ResultError(ConfigError):
    """A result file that cannot be read: unknown schema, missing fields."""
