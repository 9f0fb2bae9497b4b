"""Without the extra: a real environment where labgrid is absent (a fresh venv that sees this
venv's packages, labgrid left out, and edgeforge from the source tree). A [labgrid] inventory
is then one line naming the extra, exit 2; static devices need no labgrid."""
from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_labgrid_inventory_without_labgrid_is_one_line_exit_2(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    farm = tmp_path / "farm"
    farm.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if entry.name.lower().startswith(("labgrid", "edgeforge", "__editable__", "_edgeforge")):
            continue
        (farm / entry.name).symlink_to(entry)
    (site / "borrowed.pth").write_text(f"{farm}\n{REPO}\n")
    probe = subprocess.run([py, "-c", "import importlib.util as u; print(u.find_spec('labgrid'))"],
                           capture_output=True, text=True, timeout=60)
    assert probe.stdout.strip() == "None", probe.stdout + probe.stderr
    inv = tmp_path / "devices.toml"
    inv.write_text('[labgrid]\ncoordinator = "127.0.0.1:20408"\n')
    r = subprocess.run([py, "-m", "edgeforge.cli", "devices", "--inventory", inv], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "pip install 'edgeforge[lab]'" in lines[0], r.stderr
