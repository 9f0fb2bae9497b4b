"""[task] kind = "segmentation": a tiny segmenter of real digits with masks, built for
linux-x86 through the CLI: the build summary reads mIoU (float, artifact, drop), no top-1, and
nothing from a native library (issue 46)."""
from __future__ import annotations

import json
import re

from task_projects import segmenter_project

from edgeforge.cli import main


def test_the_build_summary_reads_miou(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    root = segmenter_project(tmp_path / "proj")
    capsys.readouterr()
    assert main(["build", str(root), "--target", "linux-x86", "--out", str(tmp_path / "out")]) == 0
    out, err = capsys.readouterr()
    t = json.loads((tmp_path / "out" / "manifest.json").read_text())["verify"]["task"]
    assert (t["kind"], t["metric"], t["labelled"]) == ("segmentation", "miou", True)
    assert 0.3 < t["float"] <= 1.0
    line = f"mIoU {t['artifact'] * 100:.2f}% (float {t['float'] * 100:.2f}%, drop {t['drop']:.2f} points)"
    assert re.search(rf"segmentation +{re.escape(line)}", out), out
    assert "top-1" not in out and err == ""
