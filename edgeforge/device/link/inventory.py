"""The device inventory, ``devices.toml``.

Lookup order: ``--inventory FILE``, then ``$EDGEFORGE_DEVICES``, then ``./devices.toml``.

.. code-block:: toml

    [devices.pi-lab-3]
    host = "pi-lab-3.local"
    port = 22                              # optional; ~/.ssh/config is honoured
    user = "pi"                            # optional; ~/.ssh/config is honoured
    identity = "~/.ssh/id_ed25519"         # optional
    known_hosts = "~/.ssh/known_hosts"     # optional
    target = "rpi4"
    python = "python3"
    workdir = "/home/pi/edgeforge"
    tags = ["lab", "arm"]
    benchmark_bin = "/home/pi/benchmark_bin"   # optional: Paddle Lite's C++ benchmark

A local browser is a device too: ``transport = "browser"`` (with ``target``; optional ``browser``,
``driver``, ``isolate``) is a headless Chromium on this host (docs/devices.md).

Unknown keys are errors. Relative ``identity``/``known_hosts`` paths are taken from the
inventory file's directory. A ``[labgrid]`` table adds the places of a labgrid lab as devices
beside these (:mod:`edgeforge.lab.config`); such a device carries its place (``lab``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, field_validator, model_validator

from ...config import Strict, did_you_mean, parse_model, read_toml
from ...errors import ConfigError
from ...lab.config import LabRef, LabView

ENV_VAR = "EDGEFORGE_DEVICES"
DEFAULT_FILE = "devices.toml"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class Device(Strict):
    name: str = Field(pattern=NAME_PATTERN)
    host: str = Field(min_length=1)
    port: Optional[int] = Field(default=None, gt=0, lt=65536)
    user: Optional[str] = None
    identity: Optional[str] = None
    known_hosts: Optional[str] = None
    target: str
    python: str = "python3"
    workdir: str = Field(min_length=1)
    tags: list[str] = []
    benchmark_bin: Optional[str] = None
    lab: Optional[LabRef] = None        # a labgrid place (from [labgrid], never a [devices] key)
    transport: Literal["ssh", "browser"] = "ssh"
    browser: Optional[str] = None       # transport = "browser": the chromium binary
    driver: Optional[str] = None        # transport = "browser": chromedriver
    isolate: bool = True                # transport = "browser": serve with COOP/COEP

    @model_validator(mode="before")
    @classmethod
    def _browser_defaults(cls, data):
        """A browser device runs on this host: host and workdir default to the loopback's."""
        if isinstance(data, dict) and data.get("transport", "ssh") not in ("ssh", "browser"):
            raise ValueError(f"transport {data['transport']!r}: ssh (the default) or browser")
        if isinstance(data, dict) and data.get("transport") == "browser":
            data = {"host": "127.0.0.1", "workdir": "/tmp", **data}
        elif isinstance(data, dict):
            for key in ("browser", "driver", "isolate"):
                if key in data:
                    raise ValueError(f"'{key}' is for transport = \"browser\" devices")
        return data

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str) -> str:
        if not (v.startswith("/") or v == "~" or v.startswith("~/")):
            raise ValueError("must be an absolute path on the device (or start with ~/)")
        return v.rstrip("/") or "/"

    @property
    def address(self) -> str:
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{self.host}{port}"


class _InventoryFile(Strict):
    devices: dict[str, dict] = {}
    labgrid: Optional[dict] = None


@dataclass
class Inventory:
    path: Path
    devices: dict[str, Device]
    lab: LabView | None = None      # the [labgrid] lab as read (its places, notes, or error)

    def names(self) -> list[str]:
        return sorted(self.devices)

    def get(self, name: str) -> Device:
        dev = self.devices.get(name)
        if dev is None and self.lab is not None and self.lab.error is not None:
            raise self.lab.error        # it may well be a place of the lab we could not read
        if dev is None:
            have = ", ".join(self.names()) or "none"
            raise ConfigError(f"unknown device '{name}'{did_you_mean(name, self.devices)} in {self.path}",
                              hint=f"devices there: {have}")
        return dev


def find_inventory(explicit: str | os.PathLike | None = None) -> Path:
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"device inventory {path} not found")
        return path
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise ConfigError(f"device inventory {path} (from ${ENV_VAR}) not found")
        return path
    path = Path(DEFAULT_FILE)
    if path.is_file():
        return path
    raise ConfigError("no device inventory",
                      hint=f"pass --inventory FILE, set ${ENV_VAR}, or create ./{DEFAULT_FILE} "
                           "with a [devices.NAME] table (host, target, workdir, ...)")


def _local_path(value: str | None, base: Path) -> str | None:
    if not value:
        return value
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (base / p).resolve())


def load_inventory(explicit: str | os.PathLike | None = None) -> Inventory:
    path = find_inventory(explicit)
    data = read_toml(path, "device inventory")
    top = parse_model(_InventoryFile, data, str(path))
    devices: dict[str, Device] = {}
    base = path.resolve().parent
    for name, entry in top.devices.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: devices.{name} must be a table")
        entry = dict(entry)
        for key in ("name", "lab"):
            if key in entry:
                why = "the table name is the device name" if key == "name" else "lab devices come from [labgrid]"
                raise ConfigError(f"{path}: unknown key 'devices.{name}.{key}' ({why})")
        devices[name] = _with_local_paths(parse_model(Device, {"name": name, **entry}, f"{path} [devices.{name}]"),
                                          base)
    lab = None
    if top.labgrid is not None:
        from ...lab.config import read_lab

        lab = read_lab(top.labgrid, str(path))
        for ref, fields in lab.devices:
            if ref.place in devices:
                raise ConfigError(f"{path}: labgrid place {ref.place} has the name of [devices.{ref.place}]",
                                  hint="rename the static device, or leave the place out with [labgrid] where")
            try:
                dev = parse_model(Device, {"name": ref.place, **fields, "lab": ref}, f"labgrid place {ref.place}")
            except ConfigError as exc:      # another user's place (its address, its tags): not ours to fix
                lab.skip(ref.place, exc.message.removeprefix(f"labgrid place {ref.place}: "))
                continue
            devices[ref.place] = _with_local_paths(dev, base)
    return Inventory(path, devices, lab)


def _with_local_paths(dev: Device, base: Path) -> Device:
    return dev.model_copy(update={"identity": _local_path(dev.identity, base),
                                  "known_hosts": _local_path(dev.known_hosts, base)})


def render_device_toml(dev: Device) -> str:
    """One ``[devices.NAME]`` table, as written by localsshd."""
    import json

    lines = [f"[devices.{dev.name}]"]
    defaults = {"transport": "ssh", "isolate": True}
    for key, value in dev.model_dump(exclude={"name", "lab"}).items():
        if value is None or value == [] or defaults.get(key, object()) == value:
            continue
        lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def select_devices(inv: Inventory, selector: str, lab_down_ok: bool = False) -> list[Device]:
    """Devices named by ``selector``: ``all``, or a comma-separated list of tags and device names
    (their union, in inventory order). An item that is neither a tag nor a name is an error.
    A ``[labgrid]`` coordinator that does not answer is its error (exit 4) wherever the lab's
    devices may be meant, never a silent drop: ``lab_down_ok`` lets ``all`` give the static
    devices (a caller that reports the lab's failure itself, as fleet bench does)."""
    items = [s.strip() for s in str(selector).split(",") if s.strip()]
    if not items:
        raise ConfigError("--devices needs a tag, a device name or 'all'")
    lab_down = inv.lab.error if inv.lab is not None else None
    if "all" in items:
        if lab_down is not None and not (lab_down_ok and inv.devices):
            raise lab_down
        if not inv.devices:
            raise ConfigError(f"no devices in {inv.path}")
        return [inv.devices[n] for n in inv.names()]
    tags = sorted({t for d in inv.devices.values() for t in d.tags})
    chosen: set[str] = set()
    for item in items:
        hit = {n for n, d in inv.devices.items() if n == item or item in d.tags}
        if not hit and lab_down is not None:
            raise lab_down              # it may well be a place or a tag of the lab we could not read
        if not hit:
            raise ConfigError(f"no device named or tagged '{item}' in {inv.path}"
                              f"{did_you_mean(item, list(inv.devices) + tags)}",
                              hint=f"devices: {', '.join(inv.names()) or 'none'}; tags: {', '.join(tags) or 'none'}; "
                                   "or 'all'")
        chosen |= hit
    return [inv.devices[n] for n in inv.names() if n in chosen]


def select_where(inv: Inventory, where: dict[str, str]) -> list[Device]:
    """The lab devices whose place has every tag of ``where`` (``--where KEY=VALUE``), by name."""
    from ...lab.config import tagged

    if inv.lab is None:
        raise ConfigError(f"--where selects labgrid places, and {inv.path} has no [labgrid] table")
    if inv.lab.error is not None:
        raise inv.lab.error
    chosen = [d for n, d in sorted(inv.devices.items()) if d.lab is not None and tagged(d.lab.tags, where)]
    if not chosen:
        want = " ".join(f"{k}={v}" for k, v in where.items())
        have = sorted({f"{k}={v}" for d in inv.devices.values() if d.lab for k, v in d.lab.tags.items()})
        raise ConfigError(f"no labgrid place at {inv.lab.coordinator} is tagged {want}",
                          hint=f"tags there: {', '.join(have) or 'none'}")
    return chosen
