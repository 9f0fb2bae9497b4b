"""The deploy record: what a deploy or rollback did on each device, ``edgeforge.deploy/1``.

One :class:`DeployRecord` per invocation (``edgeforge deploy/rollback`` write it into the results
directory, ``--json`` prints it): the
action, the release name, the build, the canary count and gates, and one :class:`DeviceEntry`
per selected device, its failure as a value (status, error, hint, exit code), as a fleet bench
records them. It is a :class:`~edgeforge.results.schema.Versioned` document, written and read by
the same model: a record of another schema version is refused when read (:meth:`DeployRecord.check`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .schema import Versioned

SCHEMA = "edgeforge.deploy/1"
# statuses: pending | deployed | rolled back | reverted (a canary switched back) | unchanged |
# switched back (health check failed) | smoke failed | gate failed | failed | busy | skipped |
# not deployed (a canary failed first, or no build for the device's target) | refused (another
# model under the name) | switched, health unchecked (live, its health check could not run) |
# unknown (a switch was sent, the connection lost, current not read back) | interrupted


class DeviceEntry(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="allow")

    device: str
    target: str
    role: str = "device"                    # device | canary | rest
    status: str = "pending"
    release: str | None = None           # the release this deploy made
    from_: str | None = Field(None, alias="from")    # current before
    to: str | None = None                # what current was switched to
    current: str | None = None           # where current points now
    verified: bool = False               # current is the device's answer, no change in flight since
    switch_sent: bool = False            # a switch of current was sent to the device
    read_back: bool | None = None        # after a failure: current was read back (None: not needed)
    error: str | None = None
    hint: str | None = None
    exit_code: int = 0
    notes: list[str] = []
    smoke: dict | None = None
    runner_sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")   # the runner zipapp of the smoke test
    health: dict | None = None
    transfer: dict | None = None
    pruned: list[str] = []
    bench_result: str | None = None
    gates: list[dict] = []


class DeployRecord(Versioned):
    SCHEMA: ClassVar[str] = SCHEMA
    KIND: ClassVar[str] = "deploy record"

    schema_id: str = Field(SCHEMA, alias="schema")
    id: str
    action: str                             # deploy | rollback
    name: str
    created_at: str
    edgeforge_version: str
    build: dict | None = None
    keep: int | None = None
    canary: int = 0
    gates: dict[str, Any] = {}
    devices: list[DeviceEntry] = []
    notes: list[str] = []

    @property
    def exit_code(self) -> int:
        """130 when interrupted, else 4 (or 70) when a device failed, else 2 for a refused
        input, else 1 when a smoke test or gate failed, else 0."""
        codes = {e.exit_code for e in self.devices}
        for code in (130, 70, 4, 2, 1):
            if code in codes:
                return code
        return 0

    def to_json(self) -> dict:
        """Every field, defaults included: scripts read a record's keys without guessing."""
        return self.model_dump(by_alias=True, mode="json")


def new_record(action: str, rid: str, name: str, *, build_dir=None, manifest: dict | None = None,
               keep: int | None = None, canary: int = 0, gates: dict | None = None) -> DeployRecord:
    from .. import __version__
    from .schema import now_iso

    build = None
    if manifest is not None:
        m = manifest
        build = {"dir": str(build_dir), "name": m.get("name"), "sha256": m["artifact"]["sha256"],
                 "target": m["target"], "backend": m["backend"], "precision": m["precision"]}
    return DeployRecord(id=rid, action=action, name=name, created_at=now_iso(), edgeforge_version=__version__,
                        build=build, keep=keep, canary=canary, gates=dict(gates or {}))


def record_filename(record: DeployRecord) -> str:
    """``<id>-<name>.json``: the id starts with the action and the UTC time (``deploy-20261201T...``)."""
    from .schema import slug

    return f"{slug(record.id)}-{slug(record.name)}.json"


def record_filename_suffix(name: str) -> str:
    """How the file names of NAME's records end (for the next command's check)."""
    from .schema import slug

    return f"-{slug(name)}.json"


def write_record(results_dir, record: DeployRecord) -> Path:
    """Write ``record`` under ``results_dir`` atomically; an earlier file is never replaced."""
    from .schema import write_document

    return write_document(results_dir, record_filename(record), record.to_json())
