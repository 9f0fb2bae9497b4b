"""Reading what ``labgrid-client`` prints: places (``-v places``), resources (``-v resources``)
and reservations (``reservations``, ``wait``). labgrid 26 has no machine-readable output for
these; the formats are its ``Place.show``, ``Reservation.show`` and ``pformat`` of a resource.
A line this parser does not know is skipped, so a newer labgrid that adds a field still reads."""
from __future__ import annotations

import ast
import fnmatch
from dataclasses import dataclass, field


@dataclass
class PlaceInfo:
    """One place as the coordinator sees it."""
    name: str
    tags: dict[str, str] = field(default_factory=dict)
    matches: list[str] = field(default_factory=list)       # exporter/group/cls[/name] patterns
    acquired: str | None = None                            # "host/user" of the holder
    reservation: str | None = None                         # the token it is allocated to
    comment: str = ""

    def holder(self) -> str | None:
        """``user (on host)`` of whoever acquired it."""
        if not self.acquired:
            return None
        host, _, user = self.acquired.partition("/")
        return f"{user} (on {host})" if user else self.acquired


@dataclass
class Resource:
    exporter: str
    group: str
    cls: str
    name: str
    params: dict = field(default_factory=dict)
    avail: bool = True
    acquired: str | None = None


@dataclass
class ReservationInfo:
    token: str
    owner: str = ""
    state: str = ""                      # waiting | allocated | acquired | expired | invalid
    prio: float = 0.0
    filters: dict[str, str] = field(default_factory=dict)    # the "main" group
    allocation: str | None = None        # the place it was allocated
    created: str = ""


def _pairs(text: str, sep: str) -> dict[str, str]:
    out = {}
    for item in text.split(sep):
        k, eq, v = item.strip().partition("=")
        if eq and k:
            out[k] = v
    return out


def parse_places(text: str) -> list[PlaceInfo]:
    """``labgrid-client -v places``: blocks of ``Place 'NAME':`` and indented fields."""
    places: list[PlaceInfo] = []
    section = None
    for raw in text.splitlines():
        if raw.startswith("Place '") and raw.rstrip().endswith("':"):
            places.append(PlaceInfo(raw.rstrip()[len("Place '"):-2]))
            section = None
            continue
        if not places or not raw.strip():
            continue
        p, line = places[-1], raw.strip()
        if raw.startswith("    ") and section == "matches":
            p.matches.append(line.split(" -> ")[0])
            continue
        key, _, value = line.partition(":")
        value = value.strip()
        section = key if key in ("matches", "acquired resources") else None
        if key == "tags":
            p.tags = _pairs(value, ",")
        elif key == "acquired":
            p.acquired = None if value in ("", "None") else value
        elif key == "reservation":
            p.reservation = value or None
        elif key == "comment":
            p.comment = value
    return places


def parse_resources(text: str) -> list[Resource]:
    """``labgrid-client -v resources``: ``Resource 'NAME' (exp/group/cls[/NAME]):`` then the
    resource's dict, pretty-printed and indented."""
    out: list[Resource] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not (line.startswith("Resource '") and line.endswith("):") and " (" in line):
            continue
        path = line[line.index(" (") + 2:-2].replace("[/", "/").rstrip("]")
        parts = path.split("/")
        if len(parts) != 4:
            continue
        body = []
        while i < len(lines) and lines[i].startswith("      "):
            body.append(lines[i].strip())
            i += 1
        try:
            d = ast.literal_eval(" ".join(body)) if body else {}
        except (ValueError, SyntaxError):
            d = {}
        if not isinstance(d, dict):
            d = {}
        out.append(Resource(*parts, params=dict(d.get("params") or {}), avail=bool(d.get("avail", True)),
                            acquired=d.get("acquired")))
    return out


def parse_reservations(text: str) -> list[ReservationInfo]:
    """``labgrid-client reservations`` (``Reservation 'TOKEN':`` blocks) or the blocks that
    ``wait TOKEN`` prints once a second (no header; each starts with ``owner:``)."""
    out: list[ReservationInfo] = []
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("Reservation '") and line.endswith("':"):
            out.append(ReservationInfo(line[len("Reservation '"):-2]))
            section = None
            continue
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "owner" and (not out or out[-1].owner):
            out.append(ReservationInfo(""))     # a ``wait`` block
        if not out:
            continue
        r = out[-1]
        if section == "filters" and key == "main":
            r.filters = _pairs(value, " ")
            continue
        if section == "allocations" and key == "main":
            r.allocation = value or None
            continue
        section = key if key in ("filters", "allocations") else None
        if key == "owner":
            r.owner = value
        elif key == "token":
            r.token = value
        elif key == "state":
            r.state = value
        elif key == "prio":
            try:
                r.prio = float(value)
            except ValueError:
                pass
        elif key == "created":
            r.created = value
    return out


def matches(pattern: str, res: Resource) -> bool:
    """labgrid's ``ResourceMatch.ismatch``: ``exporter/group/cls[/name]``, fnmatch per part."""
    parts = pattern.split("/")
    if not 3 <= len(parts) <= 4:
        return False
    have = (res.exporter, res.group, res.cls)
    if not all(fnmatch.fnmatchcase(h, p) for h, p in zip(have, parts[:3])):
        return False
    return len(parts) == 3 or fnmatch.fnmatchcase(res.name, parts[3])


def network_service(place: PlaceInfo, resources: list[Resource]) -> Resource | None:
    """The place's ``NetworkService`` (the first one its matches take), or None."""
    for res in resources:
        if res.cls == "NetworkService" and any(matches(m, res) for m in place.matches):
            return res
    return None


def filter_matches(filters: dict[str, str], place: PlaceInfo) -> bool:
    """Whether a reservation's filter takes ``place`` (the coordinator adds ``name=PLACE``)."""
    tags = {**place.tags, "name": place.name}
    return all(tags.get(k) == v for k, v in filters.items())


def queue_position(reservations: list[ReservationInfo], token: str, place: PlaceInfo) -> int | None:
    """1 + the waiting reservations the coordinator serves before ``token`` that could take
    ``place`` (its order: higher priority first, then older); None when ``token`` is not waiting."""
    order = sorted(reservations, key=lambda r: (-r.prio, r.created))
    ahead = 0
    for r in order:
        if r.token == token:
            return ahead + 1 if r.state == "waiting" else None
        if r.state == "waiting" and filter_matches(r.filters, place):
            ahead += 1
    return None
