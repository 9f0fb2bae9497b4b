"""The labgrid client, driven as a subprocess: ``python -m labgrid.remote.client -x ADDR ...``
in edgeforge's own interpreter (labgrid is the optional extra ``edgeforge[lab]``; it is looked
for only when an inventory has a ``[labgrid]`` table, and never imported here).

Every failure leaves this module as an edgeforge error: a coordinator that does not answer is
:class:`LabUnreachable` (exit 4), anything else the coordinator refuses is :class:`LabRefused`
(exit 4); neither counts against a board's health. labgrid absent is a ConfigError (exit 2).
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from ..errors import ConfigError, DeviceError, Unreachable
from .parse import PlaceInfo, ReservationInfo, Resource, parse_places, parse_reservations, parse_resources

INSTALL_HINT = "pip install 'edgeforge[lab]'"
CALL_TIMEOUT_S = 30.0
COORDINATOR = "labgrid"        # the "device" of an error that is the coordinator's, not a board's
# what the client says when the coordinator does not answer (grpc's and labgrid's own words)
_DOWN = ("could not connect to coordinator", "failed to connect to all addresses", "coordinator is unavailable",
         "connection refused", "unavailable", "deadline exceeded", "socket closed")
# the environment labgrid-client would otherwise read in place of our arguments
_DROPPED_ENV = ("LG_ENV", "LG_PLACE", "LG_STATE", "LG_INITIAL_STATE", "LG_TOKEN", "LG_COORDINATOR")
# ``wait TOKEN`` in a child that ends when its stdin closes: when edgeforge dies, even by
# SIGKILL, its reservation stops being refreshed (and expires) instead of living on
WATCHED_CLIENT = ("import os, sys, threading\n"
                  "threading.Thread(target=lambda: (os.read(0, 1), os._exit(3)), daemon=True).start()\n"
                  "from labgrid.remote.client import main\n"
                  "sys.argv = ['labgrid-client'] + sys.argv[1:]\n"
                  "main()\n")


class LabUnreachable(Unreachable):
    """The labgrid coordinator does not answer (down, wrong address, lost mid-wait)."""

    transient = False               # a connect retry does not bring a coordinator back
    counts_against_health = False   # the board is not at fault

    def __init__(self, device: str, detail: str, *, hint: str | None = None):
        super().__init__(device, detail, hint=hint)
        if device == COORDINATOR:   # not about one board: no "device NAME:" in front
            self.message = self.detail
            self.args = (self.one_line(),)


class LabRefused(DeviceError):
    """The coordinator refused a request (acquire, reserve), or a reservation vanished."""

    counts_against_health = False


def require_labgrid() -> None:
    """ConfigError (exit 2, one line) when this interpreter cannot import labgrid."""
    if importlib.util.find_spec("labgrid") is None:
        raise ConfigError(f"the [labgrid] inventory needs labgrid, not installed beside edgeforge: {INSTALL_HINT}")


@dataclass
class Call:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def message(self) -> str:
        """The client's error, one line (its last non-empty stderr line)."""
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        text = lines[-1] if lines else f"exit {self.returncode}"
        for prefix in ("labgrid-client: ", "client.py: ", "Server error: ", "Error: "):
            text = text.removeprefix(prefix)
        return text.removeprefix("Error: ")


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Waiter:
    """``labgrid-client wait TOKEN`` running: it polls the reservation once a second (which
    keeps it alive) and exits when it is no longer waiting. Output goes to files, never a pipe
    nobody reads."""

    def __init__(self, client: "LabClient", token: str):
        self.out = tempfile.TemporaryFile(mode="w+")
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-c", WATCHED_CLIENT, "-x", client.address, "wait", token],
                                     stdin=subprocess.PIPE, stdout=self.out, stderr=self.err, env=child_env(),
                                     start_new_session=True)

    def poll(self) -> int | None:
        return self.proc.poll()

    def last(self) -> ReservationInfo | None:
        self.out.seek(0)
        blocks = parse_reservations(self.out.read())
        return blocks[-1] if blocks else None

    def call(self) -> Call:
        self.err.seek(0)
        return Call(self.proc.args, self.proc.returncode, "", self.err.read())

    def stop(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()         # the child exits on EOF
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            self.out.close()
            self.err.close()


class LabClient:
    """One coordinator. ``device``: the name errors carry (a place's device, or the lab)."""

    def __init__(self, address: str, *, timeout_s: float = CALL_TIMEOUT_S):
        require_labgrid()
        self.address = address
        self.timeout_s = float(timeout_s)

    def run(self, *args: str, device: str = COORDINATOR, timeout_s: float | None = None) -> Call:
        argv = [sys.executable, "-m", "labgrid.remote.client", "-x", self.address, *args]
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            p = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=limit,
                               stdin=subprocess.DEVNULL, start_new_session=True)
        except subprocess.TimeoutExpired:
            raise self.unreachable(device, f"no answer within {limit:g}s") from None
        except OSError as exc:
            raise ConfigError(f"cannot run labgrid's client with {sys.executable}: {exc}",
                              hint=INSTALL_HINT) from None
        return Call(argv, p.returncode, p.stdout, p.stderr)

    def unreachable(self, device: str, why: str) -> LabUnreachable:
        return LabUnreachable(device, f"labgrid coordinator {self.address} does not answer ({why})",
                              hint="is labgrid-coordinator running there? ([labgrid] coordinator in "
                                   "devices.toml, or $LG_COORDINATOR)")

    def error(self, call: Call, device: str, doing: str) -> DeviceError:
        """The edgeforge error for a failed ``call``."""
        low = call.stderr.lower()
        if any(s in low for s in _DOWN):
            return self.unreachable(device, f"while {doing}: {call.message}")
        return LabRefused(device, f"labgrid refused {doing}: {call.message}")

    def checked(self, *args: str, device: str = COORDINATOR, doing: str) -> Call:
        call = self.run(*args, device=device)
        if call.returncode != 0:
            raise self.error(call, device, doing)
        return call

    # ------------------------------------------------------------ what the lab holds

    def places(self) -> list[PlaceInfo]:
        return parse_places(self.checked("-v", "places", doing="listing places").stdout)

    def resources(self) -> list[Resource]:
        return parse_resources(self.checked("-v", "resources", doing="listing resources").stdout)

    def reservations(self, device: str = COORDINATOR) -> list[ReservationInfo]:
        return parse_reservations(self.checked("reservations", device=device, doing="listing reservations").stdout)

    # ------------------------------------------------------------ reserve, acquire, release

    def reserve(self, filters: dict[str, str], priority: int, device: str) -> str:
        """A new reservation's token (``reserve --shell --prio N KEY=VALUE...``, not waited for)."""
        pairs = [f"{k}={v}" for k, v in sorted(filters.items())]
        call = self.checked("reserve", "--shell", "--prio", str(priority), *pairs, device=device,
                            doing=f"a reservation for {' '.join(pairs)}")
        for line in call.stdout.splitlines():
            if line.startswith("export LG_TOKEN="):
                return line.split("=", 1)[1].strip()
        raise LabRefused(device, f"labgrid's reserve printed no token: {call.stdout.strip()[:200]}")

    def waiter(self, token: str) -> Waiter:
        return Waiter(self, token)

    def acquire(self, place: str, device: str) -> None:
        self.checked("-p", place, "acquire", device=device, doing=f"acquiring place {place}")

    def release(self, place: str, device: str) -> None:
        self.checked("-p", place, "release", device=device, doing=f"releasing place {place}")

    def cancel(self, token: str, device: str) -> None:
        """Cancel reservation ``token``; one that no longer exists is fine."""
        call = self.run("cancel-reservation", token, device=device)
        if call.returncode != 0 and "does not exist" not in call.stderr:
            raise self.error(call, device, f"cancelling reservation {token}")
