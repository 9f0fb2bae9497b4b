"""Reaching one device, as every verb does it: :func:`connect` opens the SSH connection and tries
a transient failure again with exponential backoff; :func:`leased` holds the device's lease
(:mod:`.lease`) around the work, released however the work ends. ``bench`` (and through it
deploy, fleet, sweep and load) and ``devices setup`` go through both.

A device of a labgrid lab (``device.lab``) is reserved and acquired in labgrid first
(:class:`edgeforge.lab.hold.PlaceHold`: ``opts.lab``, a :class:`~edgeforge.options.LabOptions`); closing the
connection releases the place and cancels the reservation. The verbs know nothing of it, and
edgeforge's own lease is still taken on the board.

:class:`Session` is the two together, as every verb that reaches a device uses them (``bench``
and through it fleet, sweep and ``load``; ``deploy``, ``rollback``, ``releases``; ``devices setup``
and ``devices check``): one set of connection options (:class:`~edgeforge.options.ConnectionOptions`:
``connect_timeout``, ``timeout``, ``trust_new_host``, ``retries``, ``wait``), the host keys it
recorded reported, the lease (or none, for a read-only verb) released however the work ends, a
signal mid-acquire included. The health record around a verb's work is
:func:`.health.guarded`."""
from __future__ import annotations

import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from ...errors import ConfigError, DeviceError
from ...options import RETRIES, ConnectionOptions
from .inventory import Device
from .lease import Lease, lease_ttl
from .transport import SSHTransport

BACKOFF_S = 0.5             # first wait; doubles each retry

Step = Callable[[str, str], None]   # (step, message)


class HeldTransport(SSHTransport):
    """The transport to a lab device: closing it gives the labgrid place back."""

    hold = None

    def close(self) -> None:
        super().close()
        if self.hold is not None:   # once; a second close (another thread) waits until it is done
            self.hold.give_back()


def hold_place(device: Device, opts: ConnectionOptions | None, say: Step):
    """The device's labgrid place, reserved and acquired (None for a device outside a lab)."""
    if device.lab is None:
        return None
    from ...lab.client import LabClient
    from ...lab.hold import PlaceHold, Queue

    lab = (opts or ConnectionOptions()).lab
    return PlaceHold(LabClient(device.lab.coordinator), device.lab.place, device.name,
                     Queue(priority=lab.priority, wait_timeout=lab.wait_timeout), say).take()


def connect(device: Device, *, connect_timeout: float, trust_new_host: bool = False, retries: int = RETRIES,
            backoff_s: float = BACKOFF_S, on_step: Step | None = None,
            on_attempt: Callable[[int], None] | None = None, opts: ConnectionOptions | None = None) -> SSHTransport:
    """An open transport to ``device``; a transient failure is tried ``retries`` more times. A lab
    device's place is held first, until the transport is closed (``opts``: how to queue)."""
    if device.transport != "ssh":
        raise ConfigError(f"device {device.name} is a browser (transport = \"{device.transport}\"), "
                          "not an SSH device", hint="bench, run and sweep measure on it; `edgeforge devices check "
                          f"{device.name}` checks it")
    say = on_step or (lambda step, msg: None)
    hold = hold_place(device, opts, say)
    try:
        tr = _open(device, connect_timeout, trust_new_host, retries, backoff_s, say, on_attempt,
                   HeldTransport if hold is not None else SSHTransport)
    except BaseException:
        if hold is not None:
            hold.give_back()
        raise
    if hold is not None:
        tr.hold = hold
    return tr


def _open(device, connect_timeout, trust_new_host, retries, backoff_s, say, on_attempt, cls) -> SSHTransport:
    for attempt in range(1, retries + 2):
        if on_attempt is not None:
            on_attempt(attempt)
        tr = cls(device, connect_timeout=connect_timeout, trust_new_host=trust_new_host)
        try:
            return tr.open()
        except DeviceError as exc:
            if not exc.transient or attempt > retries:
                if attempt > 1:
                    raise exc.restate(f"{exc.detail} (after {attempt} tries)") from None
                raise
            delay = backoff_s * 2 ** (attempt - 1)
            say("connect", f"{exc.detail}; try {attempt + 1} of {retries + 1} in {delay:.1f}s")
            time.sleep(delay)
    raise AssertionError("unreachable")


@contextmanager
def leased(tr: SSHTransport, *, ttl_s: float, wait_s: float = 0.0, what: str = "",
           on_step: Step | None = None) -> Iterator[Lease]:
    """The device's lease for the ``with`` block: waits up to ``wait_s`` for a holder, else
    :class:`~edgeforge.errors.Busy`; released on the way out, a signal included."""
    say = on_step or (lambda step, msg: None)
    lease = Lease(tr, ttl_s, wait_s=wait_s, what=what, on_step=say)
    say("lease", f"{tr.device.workdir}/.lease")
    try:
        lease.acquire()
    except KeyboardInterrupt:       # a signal mid-acquire: the device may have granted it
        lease.held = True           # release is by token: a lease not ours stays
        lease.release()
        raise
    try:
        yield lease
    finally:
        lease.release()


@dataclass(frozen=True)
class Timeouts:
    """Seconds to connect and for each command on the device."""

    connect_timeout_s: float
    command_timeout_s: float


def device_timeouts(dev: Device, opts: ConnectionOptions) -> Timeouts:
    """Timeouts for a verb without a build (rollback, releases, devices check and setup): the
    flags, else the device's target's bench defaults (10 s, 600 s for a target not known)."""
    from ...targets import load_target

    try:
        b = load_target(dev.target).bench
        connect_s, command_s = b.connect_timeout_s, b.command_timeout_s
    except ConfigError:
        connect_s, command_s = 10.0, 600.0
    return Timeouts(float(opts.connect_timeout or connect_s), float(opts.timeout or command_s))


class Session:
    """One device reached for one verb's work: ``with Session(...) as s:`` connects
    (:func:`connect`, ``opts.retries`` with backoff), reports the host keys it recorded, takes
    the lease for ``command_timeout_s`` plus a margin (``lease=False``: none, a read-only verb),
    and gives both back on the way out. ``s.tr``, ``s.lease``; ``s.attempts``: connect tries of
    the last :meth:`connect`. :meth:`connect` alone opens another transport with the same
    options (a deploy reads the device back on a new connection after a lost one)."""

    def __init__(self, device: Device, opts: ConnectionOptions | None, *, connect_timeout_s: float,
                 command_timeout_s: float, what: str = "", lease: bool = True,
                 on_step: Step | None = None, backoff_s: float = BACKOFF_S):
        self.device, self.opts = device, opts or ConnectionOptions()
        self.connect_timeout_s, self.command_timeout_s = float(connect_timeout_s), float(command_timeout_s)
        self.what, self.take_lease, self.backoff_s = what, lease, float(backoff_s)
        self.on_step = on_step or (lambda step, msg: None)
        self.attempts = 0
        self.tr: SSHTransport | None = None
        self.lease: Lease | None = None
        self._stack: ExitStack | None = None

    def connect(self) -> SSHTransport:
        def attempt(n: int) -> None:
            self.attempts = n

        return connect(self.device, connect_timeout=self.connect_timeout_s,
                       trust_new_host=self.opts.trust_new_host, retries=self.opts.retries,
                       backoff_s=self.backoff_s, on_step=self.on_step, on_attempt=attempt, opts=self.opts)

    def __enter__(self) -> "Session":
        with ExitStack() as stack:
            self.tr = self.connect()
            stack.callback(self.tr.close)
            for host, fp in self.tr.recorded_host_keys:
                self.on_step("connect", f"recorded new host key {fp} for {host} in {self.tr.known_hosts}")
            if self.take_lease:
                self.lease = stack.enter_context(
                    leased(self.tr, ttl_s=lease_ttl(self.command_timeout_s), wait_s=self.opts.wait,
                           what=self.what, on_step=self.on_step))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()
