"""Reaching one device, as every verb does it: :func:`connect` opens the SSH connection and tries
a transient failure again with exponential backoff; :func:`leased` holds the device's lease
(:mod:`.lease`) around the work, released however the work ends. ``bench`` (and through it
deploy, fleet, sweep and load) and ``devices setup`` go through both.

A device of a labgrid lab (``device.lab``) is reserved and acquired in labgrid first
(:class:`edgeforge.lab.hold.PlaceHold`: ``opts.priority``, ``opts.wait_timeout``); closing the
connection releases the place and cancels the reservation. The verbs know nothing of it, and
edgeforge's own lease is still taken on the board."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

from ..errors import DeviceError
from ..options import RETRIES, BenchOptions
from .inventory import Device
from .lease import Lease
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


def hold_place(device: Device, opts: BenchOptions | None, say: Step):
    """The device's labgrid place, reserved and acquired (None for a device outside a lab)."""
    if device.lab is None:
        return None
    from ..lab.client import LabClient
    from ..lab.hold import PlaceHold, Queue

    o = opts or BenchOptions()
    return PlaceHold(LabClient(device.lab.coordinator), device.lab.place, device.name,
                     Queue(priority=o.priority, wait_timeout=o.wait_timeout), say).take()


def connect(device: Device, *, connect_timeout: float, trust_new_host: bool = False, retries: int = RETRIES,
            backoff_s: float = BACKOFF_S, on_step: Step | None = None,
            on_attempt: Callable[[int], None] | None = None, opts: BenchOptions | None = None) -> SSHTransport:
    """An open transport to ``device``; a transient failure is tried ``retries`` more times. A lab
    device's place is held first, until the transport is closed (``opts``: how to queue)."""
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
