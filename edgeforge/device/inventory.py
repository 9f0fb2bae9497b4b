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

Unknown keys are errors. Relative ``identity``/``known_hosts`` paths are taken from the
inventory file's directory.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pydantic import Field, field_validator

from ..config import Strict, did_you_mean, parse_model, read_toml
from ..errors import ConfigError

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


@dataclass
class Inventory:
    path: Path
    devices: dict[str, Device]

    def names(self) -> list[str]:
        return sorted(self.devices)

    def get(self, name: str) -> Device:
        dev = self.devices.get(name)
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
    for name, entry in top.devices.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: devices.{name} must be a table")
        entry = dict(entry)
        if "name" in entry:
            raise ConfigError(f"{path}: unknown key 'devices.{name}.name' (the table name is the device name)")
        dev = parse_model(Device, {"name": name, **entry}, f"{path} [devices.{name}]")
        base = path.resolve().parent
        devices[name] = dev.model_copy(update={"identity": _local_path(dev.identity, base),
                                               "known_hosts": _local_path(dev.known_hosts, base)})
    return Inventory(path, devices)


def render_device_toml(dev: Device) -> str:
    """One ``[devices.NAME]`` table, as written by localsshd."""
    import json

    lines = [f"[devices.{dev.name}]"]
    for key, value in dev.model_dump(exclude={"name"}).items():
        if value is None or value == []:
            continue
        lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def select_devices(inv: Inventory, selector: str) -> list[Device]:
    """Devices named by ``selector``: ``all``, or a comma-separated list of tags and device names
    (their union, in inventory order). An item that is neither a tag nor a name is an error."""
    items = [s.strip() for s in str(selector).split(",") if s.strip()]
    if not items:
        raise ConfigError("--devices needs a tag, a device name or 'all'")
    if "all" in items:
        if not inv.devices:
            raise ConfigError(f"no devices in {inv.path}")
        return [inv.devices[n] for n in inv.names()]
    tags = sorted({t for d in inv.devices.values() for t in d.tags})
    chosen: set[str] = set()
    for item in items:
        hit = {n for n, d in inv.devices.items() if n == item or item in d.tags}
        if not hit:
            raise ConfigError(f"no device named or tagged '{item}' in {inv.path}"
                              f"{did_you_mean(item, list(inv.devices) + tags)}",
                              hint=f"devices: {', '.join(inv.names()) or 'none'}; tags: {', '.join(tags) or 'none'}; "
                                   "or 'all'")
        chosen |= hit
    return [inv.devices[n] for n in inv.names() if n in chosen]
