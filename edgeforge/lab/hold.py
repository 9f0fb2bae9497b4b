"""Holding a labgrid place the way a well-behaved client does: reserve, wait in the
coordinator's queue, acquire, use, release, cancel.

:class:`PlaceHold` does it in two calls (``take()``, then ``give_back()``, which the device
session ties to closing the SSH connection).

- ``take()``: a reservation for the one place (``name=PLACE``, ``--prio``), then ``wait TOKEN``
  in a child that polls the coordinator once a second (that keeps the reservation alive) while
  the progress line says where the reservation stands in the queue and who holds the place.
  When the coordinator allocates the place, it is acquired. A place someone else holds is waited
  for, never kicked. Nothing granted within ``wait_timeout`` seconds:
  :class:`~edgeforge.errors.Busy` naming the place and its holder (exit 4); the coordinator gone:
  :class:`.client.LabUnreachable` (exit 4).
- ``give_back()``: release the place if acquired, and cancel the reservation, always and
  explicitly: a reservation left behind is allocated when the place frees and blocks everyone
  else until it expires (about a minute). It runs however ``take()`` or the work ended (an
  error, Ctrl-C, SIGTERM, a lost coordinator); signals that arrive meanwhile are held until it
  is done. A coordinator that is gone by then is noted, not raised: the work's outcome stands.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..errors import Busy, DeviceError, EdgeforgeError
from ..stop_signals import signals_held
from .client import LabClient, LabRefused
from .parse import PlaceInfo, queue_position

WAIT_TIMEOUT_S = 600.0
POLL_S = 4.0            # how often the queue position and the holder are read again
TICK_S = 0.2

Step = Callable[[str, str], None]


@dataclass(frozen=True)
class Queue:
    """How a hold waits: its priority in labgrid's queue and for how long."""
    priority: int = 0
    wait_timeout: float = WAIT_TIMEOUT_S
    poll_s: float = POLL_S


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class PlaceHold:
    def __init__(self, client: LabClient, place: str, device: str, queue: Queue | None = None,
                 on_step: Step | None = None):
        self.client, self.place, self.device = client, place, device
        self.queue = queue or Queue()
        self.say = on_step or (lambda step, msg: None)
        self.token: str | None = None
        self.acquired = False
        self.waited_s: float | None = None
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._done = False

    # ------------------------------------------------------------ take

    def take(self) -> "PlaceHold":
        """Reserve, wait, acquire; on any failure (a signal included) give it all back."""
        try:
            q = self.queue
            self.say("lab", f"reserving place {self.place} at {self.client.address} (priority {q.priority})")
            self.token = self.client.reserve({"name": self.place}, q.priority, self.device)
            self.waited_s = self._wait()
            self.client.acquire(self.place, self.device)
            self.acquired = True
            self.say("lab", f"acquired place {self.place} after {self.waited_s:.0f}s in the queue")
            return self
        except BaseException:
            self.give_back()
            raise

    def _wait(self) -> float:
        start = time.monotonic()
        deadline = start + self.queue.wait_timeout
        waiter = self.client.waiter(self.token)
        try:
            polled = None
            while waiter.poll() is None:
                now = time.monotonic()
                if now >= deadline:
                    raise self._busy(now - start)
                if polled is None or now - polled >= self.queue.poll_s:
                    polled = now
                    self.say("lab", self.standing(now - start))
                time.sleep(TICK_S)
            if waiter.poll() != 0:
                raise self.client.error(waiter.call(), self.device, f"waiting for place {self.place}")
            last = waiter.last()
        finally:
            waiter.stop()
        if last is None or last.state not in ("allocated", "acquired"):
            state = last.state if last else "gone"
            raise LabRefused(self.device, f"labgrid reservation {self.token} for place {self.place} is {state}",
                             hint="it expired or was cancelled by someone else; run again")
        return time.monotonic() - start

    def _place(self) -> PlaceInfo | None:
        return next((p for p in self.client.places() if p.name == self.place), None)

    def holder(self, place: PlaceInfo | None) -> str:
        """Who keeps the place from us: its holder, or the reservation it is allocated to."""
        if place is None:
            return "nobody (the place is gone)"
        if place.acquired:
            return place.holder()
        if place.reservation and place.reservation != self.token:
            owner = next((r.owner for r in self.client.reservations(self.device) if r.token == place.reservation), "")
            return f"reservation {place.reservation}" + (f" of {owner}" if owner else "")
        return "nobody"

    def standing(self, waited: float) -> str:
        """The progress line: queue position, holder, time waited."""
        try:
            place = self._place()
            pos = queue_position(self.client.reservations(self.device), self.token, place) if place else None
            held = self.holder(place)
        except DeviceError:
            return f"waiting for place {self.place}: {waited:.0f}s of {self.queue.wait_timeout:g}s"
        where = f"{ordinal(pos)} in labgrid's queue" if pos else "allocated"
        return (f"waiting for place {self.place}: {where}, held by {held}; "
                f"{waited:.0f}s of {self.queue.wait_timeout:g}s")

    def _busy(self, waited: float) -> Busy:
        held = self.holder(self._place())
        return Busy(self.device, f"labgrid place {self.place} is still held by {held} after {waited:.0f}s "
                                 "in the queue",
                    hint=f"raise --wait-timeout (now {self.queue.wait_timeout:g}s), or ask the holder to release "
                         f"it (labgrid-client -p {self.place} release)")

    # ------------------------------------------------------------ give back

    def give_back(self) -> None:
        """Release (if acquired) and cancel the reservation; once, whatever happened before."""
        with self._lock:
            if self._done:
                return
            self._done = True
            with signals_held():
                if self.acquired:
                    self._quietly(self.client.release, self.place, self.device, what="release")
                    self.acquired = False
                if self.token:
                    self._quietly(self.client.cancel, self.token, self.device, what="cancel the reservation of")
        for note in self.notes:
            self.say("lab", note)

    def _quietly(self, fn, *args, what: str) -> None:
        try:
            fn(*args)
        except EdgeforgeError as exc:
            self.notes.append(f"could not {what} place {self.place}: {getattr(exc, 'detail', exc.message)}")
