"""Fixtures for the device tests: a real OpenSSH sshd on 127.0.0.1 and the digits builds.

The sshd and the builds are session-scoped; every test gets its own inventory file, workdir and
results directory on that sshd, so tests do not see each other's uploads.
"""
from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from edgeforge.device import localsshd
from edgeforge.device.localsshd import LocalSshd


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


@pytest.fixture(scope="session")
def builds(digits_project, tmp_path_factory):
    """digits for linux-x86: the ONNX INT8 build and the Paddle Lite fp32 build."""
    from edgeforge import api

    out = tmp_path_factory.mktemp("builds")
    onnx = api.build(digits_project, "linux-x86", out=out / "digits-linux-x86")
    lite = api.build(digits_project, "linux-x86", backend="lite", out=out / "digits-linux-x86-lite")
    assert onnx.verify_status == "passed" and lite.verify_status == "passed"
    return SimpleNamespace(onnx=onnx.out_dir, lite=lite.out_dir, onnx_manifest=onnx.manifest,
                           lite_manifest=lite.manifest, project=digits_project)


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


@pytest.fixture
def cli(capsys):
    """Run ``edgeforge ARGS`` in this process; returns (exit code, stdout, stderr)."""
    from edgeforge.cli import main

    def run(*args):
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run
