"""Target families (`--target jetson`), the grouped 80-column `targets` table, and the project
found from the current directory or a parent (issue 27)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgeforge.cli.build import targets_table
from edgeforge.errors import ConfigError
from edgeforge.project import PROJECT_FILE, find_project
from edgeforge.targets import families, list_targets, load_target, resolve_target, targets_dir
from helpers import run_cli

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("family, pick", [("jetson", "jetson-orin"), ("rpi", "rpi4"),
                                          ("android", "android-arm64"), ("linux", "linux-x86")])
def test_family_resolves_to_its_default(family, pick):
    name, note = resolve_target(family)
    assert name == pick and load_target(family).name == pick
    assert note.startswith(f"{family} → {pick}")


def test_family_note_names_the_others():
    assert resolve_target("jetson")[1] == \
        "jetson → jetson-orin (also: jetson-nano; pass --target jetson-nano for a Nano)"
    assert resolve_target("rpi5") == ("rpi5", None)      # a profile name is itself


def test_every_shipped_profile_has_a_family_with_one_default():
    for fam, members in families().items():
        assert all(t.family == fam for t in members), fam
        assert [t.family_default for t in members].count(True) == 1, fam


def _copy_targets(tmp_path: Path, edit) -> Path:
    d = tmp_path / "targets"
    shutil.copytree(targets_dir(), d)
    for p in d.glob("*.toml"):
        p.write_text(edit(p.stem, p.read_text()))
    return d


def test_family_without_a_default_lists_its_members(tmp_path):
    d = _copy_targets(tmp_path, lambda n, t: t.replace("family_default = true", "family_default = false")
                      if n == "jetson-orin" else t)
    with pytest.raises(ConfigError, match=r"family 'jetson' has no default: pass one of "
                                          r"jetson-nano, jetson-orin"):
        resolve_target("jetson", d)
    with pytest.raises(ConfigError, match="unknown target 'jetsn' \\(did you mean 'jetson'"):
        resolve_target("jetsn", d)


def test_targets_table_fits_80_columns_two_lines_a_target():
    text = targets_table(families(), 80)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    names = list_targets()
    body = [ln for ln in lines[1:] if ln.strip() and not ln.startswith("*")]
    assert len(body) <= 2 * len(names)
    starts = [ln.split()[0] for ln in body if not ln.startswith(" ")]
    assert sorted(starts) == names
    assert "jetson-orin    jetson*" in text


def test_cli_targets_at_80_columns_and_show_by_family():
    exe = Path(sys.executable).with_name("edgeforge")
    res = subprocess.run([str(exe), "targets"], env=dict(os.environ, COLUMNS="80"),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert max(len(ln) for ln in res.stdout.splitlines()) <= 80
    assert len([ln for ln in res.stdout.splitlines() if ln.strip()]) <= 2 + 2 * len(list_targets())
    shown = run_cli("targets", "show", "jetson")
    assert shown.returncode == 0 and shown.stdout.startswith("jetson-orin:")


def test_find_project_walks_up(tmp_path):
    (tmp_path / PROJECT_FILE).write_text("name = 'x'\n")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert find_project(deep) == tmp_path.resolve()
    with pytest.raises(ConfigError, match="no edgeforge.toml in .* or any directory above it"):
        find_project(Path("/proc/self"))


def test_cli_project_from_a_subdirectory_is_named(tmp_path):
    """`edgeforge check` with no project, two levels under the project: it says which it took."""
    root = tmp_path / "p"
    root.mkdir()
    (root / PROJECT_FILE).write_text('name = "p"\n')        # invalid on purpose: loading stops early
    deep = root / "src" / "deeper"
    deep.mkdir(parents=True)
    res = run_cli("check", "--target", "jetson", cwd=deep)
    assert res.returncode == 2
    assert f"project: {root.resolve()}" in res.stderr
    assert "jetson → jetson-orin" in res.stderr
    assert str(root.resolve() / PROJECT_FILE) in res.stderr     # the project it then loaded
    none = run_cli("check", "--target", "rpi4", cwd=tmp_path)
    assert none.returncode == 2 and "no edgeforge.toml in" in none.stderr
