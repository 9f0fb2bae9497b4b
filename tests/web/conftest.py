"""The browser device's fixtures: the digits example built for web-wasm (fp32 and INT8), an
inventory with a headless Chromium device, and the CLI in this process.

These tests need Debian's chromium and chromium-driver, selenium, and onnxruntime-web in the
edgeforge cache (`make test-web` installs all three); without them they fail, naming what is
missing: nothing is downloaded at test time."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def web_ready():
    from edgeforge.device.browser.chromium import DEFAULT_BROWSERS, DEFAULT_DRIVERS, find_binary, selenium_module
    from edgeforge.toolchain_web import require_web

    require_web()
    selenium_module()
    find_binary(None, DEFAULT_BROWSERS, "chromium")
    find_binary(None, DEFAULT_DRIVERS, "chromedriver")


@dataclass
class WebBuilds:
    project: Path
    fp32: Path
    int8: Path


@pytest.fixture(scope="session")
def web_builds(digits_project, tmp_path_factory, web_ready) -> WebBuilds:
    from edgeforge.cli import main

    out = tmp_path_factory.mktemp("web-builds")
    dirs = {}
    for prec in ("fp32", "int8"):
        dirs[prec] = out / f"digits-web-{prec}"
        code = main(["build", str(digits_project), "--target", "web", "--precision", prec, "--out",
                     str(dirs[prec]), "-q"])
        assert code == 0, f"build {prec} exited {code}"
    return WebBuilds(digits_project, dirs["fp32"], dirs["int8"])


@pytest.fixture
def web_lab(tmp_path):
    inv = tmp_path / "devices.toml"
    inv.write_text('[devices.chromium]\ntransport = "browser"\ntarget = "web-wasm"\n\n'
                   '[devices.open-page]\ntransport = "browser"\ntarget = "web-wasm"\nisolate = false\n')
    return inv, tmp_path / "results"

