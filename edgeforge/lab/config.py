"""The ``[labgrid]`` table of ``devices.toml``: a labgrid lab as a source of devices.

.. code-block:: toml

    [labgrid]
    coordinator = "lab-host:20408"      # optional: else $LG_COORDINATOR
    where = { board = "rpi4" }          # optional: only places with these tags

    [labgrid.defaults.rpi4]             # places with a tag whose value is rpi4
    target = "rpi4"
    python = "python3"
    workdir = "/home/pi/edgeforge"      # "{place}" becomes the place's name
    identity = "~/.ssh/lab_ed25519"
    known_hosts = "lab_known_hosts"
    benchmark_bin = "/opt/paddle-lite/benchmark_bin"

    [labgrid.places.rpi4-07]            # one place: overrides the defaults
    workdir = "/data/edgeforge"

Every place that matches ``where`` and has a ``NetworkService`` resource becomes a device named
after the place; address, user and port come from that resource, the rest from the defaults of
its tag values (applied in the order of the tag keys; two that disagree are an error) and then
its ``places`` table. ``target`` and ``workdir`` must come from one of them.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Optional

from pydantic import Field, field_validator

from ..config import Strict, did_you_mean, parse_model
from ..errors import ConfigError, DeviceError
from .client import LabClient
from .parse import PlaceInfo, network_service

ENV_VAR = "LG_COORDINATOR"
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]*$")
ADDRESS = re.compile(r"^[A-Za-z0-9_.:\[\]-]+:[0-9]{1,5}$")
FIELDS = ("target", "python", "workdir", "identity", "known_hosts", "benchmark_bin")


class PlaceSettings(Strict):
    """What labgrid does not know about a board."""
    target: Optional[str] = None
    python: Optional[str] = None
    workdir: Optional[str] = None
    identity: Optional[str] = None
    known_hosts: Optional[str] = None
    benchmark_bin: Optional[str] = None


class LabTable(Strict):
    coordinator: Optional[str] = Field(None, min_length=1)
    where: dict[str, str] = {}
    defaults: dict[str, PlaceSettings] = {}
    places: dict[str, PlaceSettings] = {}

    @field_validator("where")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        for k, val in v.items():
            if not (TAG.match(k) and TAG.match(val)):
                raise ValueError(f"'{k} = {val}' is not a labgrid tag (letters, digits, _ . : -)")
        return v


class LabRef(Strict):
    """What a lab device carries: where its place is, and the place's tags."""
    coordinator: str
    place: str
    tags: dict[str, str] = {}


@dataclass
class LabView:
    """The lab as read for an inventory: the places (all of them, for ``devices``), the device
    fields of those that are devices, what was skipped and why, or the error that stopped it."""
    coordinator: str
    where: dict[str, str]
    places: list[PlaceInfo] = field(default_factory=list)
    devices: list[tuple[LabRef, dict]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: DeviceError | None = None
    skipped: dict[str, str] = field(default_factory=dict)     # place -> why it is no device

    def skip(self, place: str, why: str) -> None:
        """A place edgeforge cannot use (a name that is no device name, tags with markup...):
        one warning on stderr naming it (once per process), and a note for ``devices``."""
        self.skipped[place] = why
        line = f"labgrid place {place!r} at {self.coordinator} skipped: {why}"
        self.notes.append(line)
        if line not in _WARNED:
            _WARNED.add(line)
            print(f"warning: {line}", file=sys.stderr, flush=True)


_WARNED: set[str] = set()
DEVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")      # inventory.NAME_PATTERN


def coordinator_address(table: LabTable, source: str) -> str:
    addr = table.coordinator or os.environ.get(ENV_VAR, "").strip()
    if not addr:
        raise ConfigError(f"{source}: [labgrid] needs coordinator = \"host:port\" (or ${ENV_VAR})")
    if not ADDRESS.match(addr):
        raise ConfigError(f"{source}: [labgrid] coordinator '{addr}' is not host:port")
    return addr


def parse_where(pairs) -> dict[str, str]:
    """``KEY=VALUE`` items (``--where``) as a dict; a bad one is a ConfigError."""
    out: dict[str, str] = {}
    for item in pairs or ():
        k, eq, v = str(item).partition("=")
        k, v = k.strip(), v.strip()
        if not eq or not TAG.match(k) or not TAG.match(v):
            raise ConfigError(f"--where {item!r}: expected KEY=VALUE, a labgrid tag (e.g. board=rpi4)")
        if out.get(k, v) != v:
            raise ConfigError(f"--where gives {k} twice ({out[k]}, {v})")
        out[k] = v
    return out


def tagged(tags: dict[str, str], where: dict[str, str]) -> bool:
    return all(tags.get(k) == v for k, v in where.items())


def read_lab(data: dict, source: str) -> LabView:
    """The ``[labgrid]`` table ``data`` against its coordinator. ConfigError for a bad table or
    labgrid missing; a coordinator that does not answer is kept as ``error`` (static devices in
    the same file still work)."""
    table = parse_model(LabTable, data, f"{source} [labgrid]")
    view = LabView(coordinator_address(table, source), dict(table.where))
    client = LabClient(view.coordinator)
    try:
        view.places = client.places()
        resources = client.resources()
    except DeviceError as exc:
        view.error = exc
        return view
    names = {p.name for p in view.places}
    for name in table.places:
        if name not in names:
            raise ConfigError(f"{source}: [labgrid.places.{name}]: no such place at {view.coordinator}"
                              f"{did_you_mean(name, names)}")
    for place in sorted(view.places, key=lambda p: p.name):
        if not tagged(place.tags, table.where):
            continue
        bad = unusable(place)
        if bad:
            view.skip(place.name, bad)
            continue
        ns = network_service(place, resources)
        if ns is None:
            view.notes.append(f"place {place.name}: no NetworkService resource, not a device")
            continue
        fields = merged(table, place, source)
        missing = [k for k in ("target", "workdir") if not fields.get(k)]
        if missing and not fields:          # nothing of this devices.toml applies: someone else's board
            view.notes.append(f"place {place.name}: no [labgrid.defaults] for its tag values and no "
                              f"[labgrid.places.{place.name}], not a device")
            continue
        if missing:
            raise ConfigError(f"{source}: labgrid place {place.name} has no {' or '.join(missing)}",
                              hint=f"set it in [labgrid.places.{place.name}] or [labgrid.defaults.TAG] "
                                   f"for one of its tag values ({', '.join(place.tags.values()) or 'none'})")
        p = ns.params
        fields.update(host=str(p.get("address") or ""), user=p.get("username") or None,
                      port=int(p["port"]) if p.get("port") else None,
                      tags=[f"{k}={v}" for k, v in sorted(place.tags.items())])
        view.devices.append((LabRef(coordinator=view.coordinator, place=place.name, tags=dict(place.tags)),
                             fields))
    return view


def unusable(place: PlaceInfo) -> str | None:
    """Why a place cannot be a device (its name or its tags), or None."""
    if not DEVICE_NAME.match(place.name) or len(place.name) > 128:
        return "its name is not a device name (letters, digits, '_', '.' and '-', starting with a letter or a digit)"
    bad = [f"{k}={v}" for k, v in place.tags.items() if not (TAG.match(k) and TAG.match(v))]
    if bad:
        return f"tag {bad[0][:60]!r} is not a labgrid tag (letters, digits, _ . : -)"
    return None


def merged(table: LabTable, place: PlaceInfo, source: str) -> dict:
    """The place's device fields: its tag values' defaults (in tag-key order), then its own."""
    fields: dict[str, str] = {}
    origin: dict[str, str] = {}
    for key in sorted(place.tags):
        value = place.tags[key]
        d = table.defaults.get(value)
        if d is None:
            continue
        for k, v in d.model_dump(exclude_none=True).items():
            if k in fields and fields[k] != v:
                raise ConfigError(f"{source}: labgrid place {place.name}: {k} is '{fields[k]}' in "
                                  f"[labgrid.defaults.{origin[k]}] and '{v}' in [labgrid.defaults.{value}]",
                                  hint=f"set it in [labgrid.places.{place.name}]")
            fields[k], origin[k] = v, value
    own = table.places.get(place.name)
    if own is not None:
        fields = {k: v for k, v in fields.items() if getattr(own, k) is None}
        fields.update(own.model_dump(exclude_none=True))
    if fields.get("workdir"):
        fields["workdir"] = fields["workdir"].replace("{place}", place.name)
    return fields
