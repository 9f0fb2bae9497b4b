"""A real labgrid lab on loopback for each test: ``labgrid-coordinator`` on a free port (a fresh
one per test, in the test's directory: an exporter that re-registers with a coordinator that
still knows it is refused with ALREADY_EXISTS), one ``labgrid-exporter`` (a unique ``-n``)
whose NetworkService resources point at the tests' own sshd devices, and places made with
``labgrid-client create / add-match / set-tags``. No mock of labgrid anywhere."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from device.conftest import builds, make_fleet  # noqa: F401 - the device tests' fixtures (cli: tests/conftest.py)
from edgeforge.device.provision.localsshd import free_port

BIN = Path(sys.executable).parent


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.device)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Labgrid:
    """A coordinator, its exporter, places: driven through the real labgrid commands."""

    def __init__(self, root: Path):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.coordinator = None
        self.exporter = None
        self.exporter_name = f"ex-{uuid.uuid4().hex[:8]}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, sshds=()) -> "Labgrid":
        if shutil_which("labgrid-coordinator") is None:
            pytest.skip("labgrid is not installed (pip install 'edgeforge[lab]')")
        log = open(self.root / "coordinator.log", "a")
        self.coordinator = subprocess.Popen([str(BIN / "labgrid-coordinator"), "-l", self.address], cwd=self.root,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while not _listening(self.port):
            assert self.coordinator.poll() is None, (self.root / "coordinator.log").read_text()
            assert time.monotonic() < deadline, "the coordinator did not listen within 30 s"
            time.sleep(0.1)
        if sshds:
            self.export(sshds)
        return self

    def export(self, sshds) -> None:
        """One exporter: a group per sshd device (its name), holding its NetworkService."""
        lines = []
        for d in sshds:
            lines += [f"{d.name}:", "  NetworkService:", "    address: 127.0.0.1",
                      f"    username: {d.device().user}", f"    port: {d.device().port}"]
        cfg = self.root / "exporter.yaml"
        cfg.write_text("\n".join(lines) + "\n")
        log = open(self.root / "exporter.log", "a")
        self.exporter = subprocess.Popen([str(BIN / "labgrid-exporter"), "-c", self.address, "-n", self.exporter_name,
                                          str(cfg)], cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + 30
        want = {f"{self.exporter_name}/{d.name}/NetworkService" for d in sshds}
        while True:
            out = self.client("resources").stdout
            if want <= set(out.split()):
                return
            assert self.exporter.poll() is None, (self.root / "exporter.log").read_text()
            assert time.monotonic() < deadline, f"resources not exported within 30 s: {out}"
            time.sleep(0.3)

    def client(self, *args, user: str | None = None, check: bool = False, timeout: float = 60):
        env = {k: v for k, v in os.environ.items() if not k.startswith("LG_")}
        if user:
            env["LG_USERNAME"] = user
        r = subprocess.run([str(BIN / "labgrid-client"), "-x", self.address, *map(str, args)], capture_output=True,
                           text=True, env=env, timeout=timeout)
        if check:
            assert r.returncode == 0, f"labgrid-client {' '.join(map(str, args))}: {r.stdout}{r.stderr}"
        return r

    def place(self, name: str, group: str, **tags) -> None:
        self.client("-p", name, "create", check=True)
        self.client("-p", name, "add-match", f"{self.exporter_name}/{group}/*", check=True)
        if tags:
            self.client("-p", name, "set-tags", *[f"{k}={v}" for k, v in tags.items()], check=True)

    def acquired(self) -> list[str]:
        """Places ``labgrid-client places --acquired`` lists."""
        return [ln.split()[0] for ln in self.client("places", "--acquired", check=True).stdout.splitlines()
                if ln.strip()]

    def reservations(self) -> str:
        return self.client("reservations", check=True).stdout

    def holder(self, place: str) -> str | None:
        for ln in self.client("-p", place, "show", check=True).stdout.splitlines():
            if ln.strip().startswith("acquired:"):
                v = ln.split(":", 1)[1].strip()
                return None if v == "None" else v
        return None

    def stop_coordinator(self) -> None:
        if self.coordinator is not None and self.coordinator.poll() is None:
            self.coordinator.terminate()
            try:
                self.coordinator.wait(10)
            except subprocess.TimeoutExpired:
                self.coordinator.kill()
                self.coordinator.wait()

    def stop(self) -> None:
        for proc in (self.exporter, self.coordinator):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def inventory(self, fleet, places: dict[str, str], where: dict | None = None, name="devices.toml") -> Path:
        """devices.toml with a [labgrid] table: ``places`` maps place -> the sshd device behind it;
        each place gets its own workdir (two loopback boards must not share a lease)."""
        lines = ["[labgrid]", f'coordinator = "{self.address}"']
        if where:
            lines.append("where = { " + ", ".join(f'{k} = "{v}"' for k, v in where.items()) + " }")
        d0 = fleet.sshds[0].device()
        lines += ["", "[labgrid.defaults.rpi4]", 'target = "linux-x86"', f'python = "{d0.python}"',
                  f'workdir = "{fleet.root / "workdirs"}/{{place}}"']
        for place, dev in places.items():
            d = fleet.sshd(dev).device()
            lines += ["", f"[labgrid.places.{place}]", f'identity = "{d.identity}"',
                      f'known_hosts = "{d.known_hosts}"']
        path = fleet.root / name
        path.write_text("\n".join(lines) + "\n")
        return path


def shutil_which(name: str):
    p = BIN / name
    return str(p) if p.exists() else None


@pytest.fixture
def labgrid(tmp_path):
    """``labgrid.start(sshds)``: a fresh coordinator (and exporter) for this test only."""
    lab = Labgrid(tmp_path / "labgrid")
    yield lab
    lab.stop()


@pytest.fixture
def rpi4_lab(make_fleet, labgrid):  # noqa: F811 - make_fleet is the device tests' fixture
    """Two loopback sshd boards exported as places rpi4-a and rpi4-b, tagged board=rpi4."""
    fleet = make_fleet(2)
    labgrid.start(fleet.sshds)
    labgrid.place("rpi4-a", "dev-a", board="rpi4")
    labgrid.place("rpi4-b", "dev-b", board="rpi4")
    inv = labgrid.inventory(fleet, {"rpi4-a": "dev-a", "rpi4-b": "dev-b"}, where={"board": "rpi4"})
    return fleet, labgrid, inv
