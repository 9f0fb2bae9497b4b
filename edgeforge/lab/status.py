"""What ``edgeforge devices`` shows of a lab: per place, its tags, who acquired it, the
reservations waiting that could take it, and whether it is one of the inventory's devices."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .client import LabClient
from .config import LabView, tagged
from .parse import filter_matches


@dataclass
class PlaceStatus:
    name: str
    tags: dict[str, str]
    acquired: str | None                  # "host/user"
    reservation: str | None               # the token it is allocated to
    waiting: list[str] = field(default_factory=list)     # tokens of waiting reservations (owner)
    device: bool = False                  # a device of this inventory (matches where, has an address)

    def to_dict(self) -> dict:
        return asdict(self)


def lab_status(view: LabView, devices: set[str]) -> list[PlaceStatus]:
    """The places of ``view`` that match its ``where``; raises the coordinator's error."""
    if view.error is not None:
        raise view.error
    reservations = LabClient(view.coordinator).reservations()
    out = []
    for p in sorted(view.places, key=lambda p: p.name):
        if not tagged(p.tags, view.where):
            continue
        waiting = [f"{r.token} ({r.owner}, priority {r.prio:g})" for r in reservations
                   if r.state == "waiting" and filter_matches(r.filters, p)]
        out.append(PlaceStatus(p.name, dict(p.tags), p.acquired, p.reservation, waiting, p.name in devices))
    return out
