"""The error tree. It follows what the caller can do next, and maps to exit codes.

0 ok, 1 a quality gate failed, 2 usage or configuration, 3 a build pass failed, 4 a device failed.
"""
from __future__ import annotations


class EdgeforgeError(Exception):
    """Base of every error edgeforge raises on purpose. ``str(err)`` is one line for the user."""

    exit_code = 3

    def __init__(self, message: str, *, hint: str | None = None):
        self.message = " ".join(str(message).split())
        self.hint = " ".join(hint.split()) if hint else None
        super().__init__(self.one_line())

    def one_line(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message


class ConfigError(EdgeforgeError):
    """Bad input from the user: a project, a target, a flag, an inventory. Fix the input."""

    exit_code = 2


class PassError(EdgeforgeError):
    """A build pass failed. ``pass_name`` names it."""

    exit_code = 3

    def __init__(self, pass_name: str, message: str, *, hint: str | None = None):
        self.pass_name = pass_name
        super().__init__(f"pass {pass_name}: {message}", hint=hint)


class ConverterCrash(PassError):
    """A native converter killed its own process (segfault, abort)."""


class DeviceError(EdgeforgeError):
    """A device could not be reached, refused us, lacks a runtime, or its runner failed."""

    exit_code = 4

    def __init__(self, device: str, message: str, *, hint: str | None = None):
        self.device = device
        super().__init__(f"device {device}: {message}", hint=hint)


class GateFailed(EdgeforgeError):
    """A quality gate (accuracy, latency, speed-up) did not hold."""

    exit_code = 1


class ResultError(ConfigError):
    """A result file that cannot be read: unknown schema, missing fields."""
