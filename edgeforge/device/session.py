"""Reaching one device, as every verb does it: :func:`connect` opens the SSH connection and tries
a transient failure again with exponential backoff; :func:`leased` holds the device's lease
(:mod:`.lease`) around the work, released however the work ends. ``bench`` (and through it
deploy, fleet, sweep and load) and ``devices setup`` go through both."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

from ..errors import DeviceError
from ..options import RETRIES
from .inventory import Device
from .lease import Lease
from .transport import SSHTransport

BACKOFF_S = 0.5             # first wait; doubles each retry

Step = Callable[[str, str], None]   # (step, message)


def connect(device: Device, *, connect_timeout: float, trust_new_host: bool = False, retries: int = RETRIES,
            backoff_s: float = BACKOFF_S, on_step: Step | None = None,
            on_attempt: Callable[[int], None] | None = None) -> SSHTransport:
    """An open transport to ``device``; a transient failure is tried ``retries`` more times."""
    say = on_step or (lambda step, msg: None)
    for attempt in range(1, retries + 2):
        if on_attempt is not None:
            on_attempt(attempt)
        tr = SSHTransport(device, connect_timeout=connect_timeout, trust_new_host=trust_new_host)
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
