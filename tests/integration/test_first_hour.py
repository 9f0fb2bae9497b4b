"""Issue 27's first done-when: in a copy of examples/digits, `edgeforge build --target jetson`
(no project argument, the family's name) exits 0, builds jetson-orin and says so in one line."""
from __future__ import annotations

import json

from helpers import copy_project, run_cli


def test_build_target_jetson_in_the_project_directory(digits_project, tmp_path):
    root = copy_project(digits_project, tmp_path / "digits")
    below = root / "notes"
    below.mkdir()
    res = run_cli("build", "--target", "jetson", "-q", cwd=below)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert "jetson → jetson-orin (also: jetson-nano; pass --target jetson-nano for a Nano)" in lines
    assert f"project: {root.resolve()}" in lines                  # found above the current directory
    manifest = json.loads((below / "build" / "digits-jetson-orin" / "manifest.json").read_text())
    assert manifest["target"] == "jetson-orin" and manifest["verify"]["status"] == "passed"
