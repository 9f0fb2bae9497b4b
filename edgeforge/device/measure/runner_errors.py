"""The runner's ``error`` events, as the errors the host raises: blame in the right place.

The runner classifies what went wrong (``kind``), and the kind decides who is at fault:

- ``build``: the build's own files do not fit (an input name the model or the reference data
  lacks, a reference file that does not load). ``usage``: the runner refused the spec it was
  given (a value out of its limits). Both are :class:`~edgeforge.errors.BuildInvalid`
  (exit 2): fix or rebuild the build, never retried, never counted against the device.
- ``digest``, ``runtime-missing``: the files changed on the device, or it lacks the runtime.
- anything else (``runtime``): the runtime failed on the device (exit 4, counted in its health).
"""
from __future__ import annotations

from ...errors import BuildInvalid, DigestMismatch, EdgeforgeError, RunnerCrashed, RuntimeMissing

BUILD_KINDS = ("build", "usage")
EXIT_BUILD = 7          # the runner's exit code for kind "build" (usage: 2)


def runner_error(device: str, build_dir, err: dict) -> EdgeforgeError:
    """The error for the runner's ``error`` event ``err`` on ``device``."""
    kind, message = err.get("kind"), " ".join(str(err.get("message") or "no message").split())
    if kind in BUILD_KINDS:
        what = "the build" if kind == "build" else "the run's settings"
        return BuildInvalid(f"{build_dir}: the runner on {device} refused {what}: {message}",
                            hint=("the build's files do not fit its manifest: rebuild it with "
                                  "`edgeforge build`" if kind == "build" else
                                  "check the flags and the build's runtime settings")
                                 + "; the device is not at fault")
    if kind == "digest":
        return DigestMismatch(device, "files on the device do not match their sha256: "
                                      + ", ".join(err.get("files") or []),
                              hint="they changed after the upload; re-run to upload them again")
    if kind == "runtime-missing":
        return RuntimeMissing(device, f"runtime missing: {message}",
                              hint="install it on the device or set python = ... in devices.toml")
    return RunnerCrashed(device, f"runner failed: {message}")
