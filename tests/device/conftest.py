"""Fixtures for the device tests: a real OpenSSH sshd on 127.0.0.1 and the digits builds.

The sshd and the builds are session-scoped; every test gets its own inventory file, workdir and
results directory on that sshd, so tests do not see each other's uploads.
"""
from __future__ import annotations

import socket
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgeforge.device.provision import localsshd
from edgeforge.device.provision.localsshd import LocalSshd


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.device)


def _need_sshd():
    if not Path(localsshd.SSHD).is_file():
        pytest.skip(f"no sshd at {localsshd.SSHD} (apt-get install -y openssh-server)")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    _need_sshd()
    d = LocalSshd(tmp_path_factory.mktemp("sshd") / "device").start()
    yield d
    d.stop()


@pytest.fixture
def own_sshd(tmp_path):
    """An sshd of this test's own, for tests that kill it."""
    _need_sshd()
    d = LocalSshd(tmp_path / "own-sshd").start()
    yield d
    d.stop()


@pytest.fixture
def silent_port():
    """A TCP port that accepts connections (the kernel's backlog) and never says a word."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    yield s.getsockname()[1]
    s.close()


class _Builds:
    """digits for linux-x86: the ONNX INT8 build, and the Paddle Lite fp32 build made on first
    use (a machine without the Lite toolchain then skips only the tests that use it)."""

    def __init__(self, project: Path, out: Path):
        from edgeforge import api

        self.project, self._out = project, out
        onnx = api.build(project, "linux-x86", out=out / "digits-linux-x86")
        assert onnx.verify_status == "passed"
        self.onnx, self.onnx_manifest = onnx.out_dir, onnx.manifest
        self._lite = None

    def _lite_build(self):
        if self._lite is None:
            from edgeforge import api

            lite = api.build(self.project, "linux-x86", backend="lite", out=self._out / "digits-linux-x86-lite")
            assert lite.verify_status == "passed"
            self._lite = lite
        return self._lite

    @property
    def lite(self) -> Path:
        return self._lite_build().out_dir

    @property
    def lite_manifest(self) -> dict:
        return self._lite_build().manifest


@pytest.fixture(scope="session")
def builds(digits_project, tmp_path_factory):
    """digits for linux-x86: ``.onnx`` (INT8) and ``.lite`` (Paddle Lite fp32, built lazily)."""
    return _Builds(digits_project, tmp_path_factory.mktemp("builds"))


@dataclass
class Lab:
    """One test's view of a device: its inventory, workdir and results directory."""

    sshd: LocalSshd
    root: Path

    @property
    def workdir(self) -> Path:
        return self.root / "workdir"

    @property
    def results(self) -> Path:
        return self.root / "results"

    def inventory(self, name: str = "local", **overrides) -> Path:
        overrides.setdefault("workdir", str(self.workdir))
        path = self.root / f"devices-{name}.toml"
        self.sshd.write_inventory(path, [self.sshd.device(name=name, **overrides)])
        return path

    def result_files(self) -> list[Path]:
        return sorted(self.results.glob("*.json")) if self.results.is_dir() else []

    def script(self, name: str, text: str) -> Path:
        p = self.root / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return p


@pytest.fixture
def lab(sshd, tmp_path) -> Lab:
    return Lab(sshd, tmp_path)


# ---------------------------------------------------------------- fleets (several sshd devices)

FLEET_TAGS = {0: ["rack1"], 1: ["rack1"], 2: ["rack2"], 3: ["rack2"]}


@dataclass
class FleetLab:
    """N real sshd devices on loopback ports, each with its own workdir; one inventory for all."""

    root: Path
    sshds: list

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.sshds]

    @property
    def inventory(self) -> Path:
        return self.root / "devices.toml"

    @property
    def state_file(self) -> Path:
        return self.root / "devices.state.json"

    @property
    def results(self) -> Path:
        return self.root / "results"

    def sshd(self, name: str) -> LocalSshd:
        return next(d for d in self.sshds if d.name == name)

    def workdir(self, name: str) -> Path:
        return self.root / "workdirs" / name

    def write_inventory(self, **per_device) -> Path:
        """``per_device``: {name: {field: value}} overrides for the device entries."""
        devs = []
        for i, d in enumerate(self.sshds):
            fields = {"workdir": str(self.workdir(d.name)), "tags": ["loopback", *FLEET_TAGS.get(i % 4, [])]}
            fields.update(per_device.get(d.name, {}))
            devs.append(d.device(**fields))
        self.sshds[0].write_inventory(self.inventory, devs)
        return self.inventory

    def result_files(self) -> list[Path]:
        return sorted(self.results.glob("*.json")) if self.results.is_dir() else []

    def results_by_device(self) -> dict[str, list[dict]]:
        import json

        out: dict[str, list[dict]] = {}
        for f in self.result_files():
            r = json.loads(f.read_text())
            out.setdefault(r["device"]["name"], []).append(r)
        return out

    def slow_python(self, seconds: float, name: str = "python-slow", until: Path | None = None) -> Path:
        """A device python whose bench runner sleeps ``seconds`` after it starts (before timing):
        it holds the device long enough to be killed or contended for. With ``until``, it sleeps
        only until that file exists (at most ``seconds``), so a test decides when it lets go."""
        import sys

        hook = self.root / f"{name}-hook"
        hook.mkdir(exist_ok=True)
        wait = (f"    import os\n    t_end = time.time() + {seconds}\n"
                f"    while time.time() < t_end and not os.path.exists({str(until)!r}):\n"
                "        time.sleep(0.05)\n") if until else f"    time.sleep({seconds})\n"
        (hook / "sitecustomize.py").write_text(
            "import sys, time\n"
            "if sys.argv and 'edgeforge_runner-' in sys.argv[0] and sys.argv[0].endswith('.pyz') and 'bench' in sys.argv[1:2]:\n"
            + wait)
        p = self.root / name
        p.write_text(f'#!/bin/sh\nPYTHONPATH={hook} exec {sys.executable} "$@"\n')
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return p

    def stop(self) -> None:
        for d in self.sshds:
            d.stop()


@pytest.fixture
def make_fleet(tmp_path):
    """``make_fleet(n)``: n sshd devices dev-a, dev-b, ... (tags loopback + rack1/rack2), started,
    with an inventory; all stopped at the end of the test."""
    _need_sshd()
    made: list[FleetLab] = []

    def make(n: int = 4, start: bool = True) -> FleetLab:
        root = tmp_path / f"fleet{len(made)}"
        root.mkdir()
        sshds = [LocalSshd(root / "sshd" / f"dev-{chr(97 + i)}", name=f"dev-{chr(97 + i)}") for i in range(n)]
        if start:
            for d in sshds:
                d.start()
        lab = FleetLab(root, sshds)
        made.append(lab)
        if start:
            lab.write_inventory()
        return lab

    yield make
    for lab in made:
        lab.stop()


# ---------------------------------------------------------------- more builds (session-wide)

@pytest.fixture(scope="session")
def fp32_build(builds, tmp_path_factory):
    """digits for linux-x86, ONNX fp32 (export is a cache hit after ``builds``)."""
    from edgeforge import api

    res = api.build(builds.project, "linux-x86", precision="fp32", out=tmp_path_factory.mktemp("fp32") / "digits-fp32")
    assert res.verify_status == "passed"
    return res.out_dir


SLOW_MODEL = '''"""DigitsNet doing several times the convolution work for the same answer: the feature
extractor runs on REPEAT copies of the input, each nudged by a different tiny offset (so no
common-subexpression pass can merge them), and the features are averaged. Same trained weights."""
import paddle

from model import DigitsNet

REPEAT = 4


class SlowDigitsNet(DigitsNet):
    def forward(self, x):
        feats = [self.features(x + 1e-6 * i) for i in range(REPEAT)]
        x = paddle.add_n(feats) * (1.0 / REPEAT)
        x = paddle.flatten(x, 1)
        return self.classifier(x)
'''


@pytest.fixture(scope="session")
def slow_build(builds, tmp_path_factory):
    """A genuinely slower artifact: the digits project with a model that does ~4x the convolution
    work (same weights, same answers), built for linux-x86 like ``builds.onnx`` (ONNX INT8)."""
    import shutil

    from edgeforge import api

    root = tmp_path_factory.mktemp("slow") / "digits-slow"
    shutil.copytree(builds.project, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "slow.py").write_text(SLOW_MODEL)
    toml = (root / "edgeforge.toml").read_text()
    toml = toml.replace('name = "digits"', 'name = "digits-slow"', 1)
    toml = toml.replace('factory = "model:DigitsNet"', 'factory = "slow:SlowDigitsNet"', 1)
    assert "slow:SlowDigitsNet" in toml
    (root / "edgeforge.toml").write_text(toml)
    res = api.build(root, "linux-x86", out=root.parent / "build")
    assert res.verify_status == "passed" and res.manifest["precision"] == "int8"
    return res.out_dir
