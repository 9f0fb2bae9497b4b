"""report.html renders offline in a real browser (headless Chromium) with its plots drawn.

Needs /usr/bin/chromium (Debian: `apt-get install -y chromium`); skipped where it is absent.
Set EDGEFORGE_REPORT_SCREENSHOT=PATH to keep the screenshot (docs/report-screenshot.png is made so).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from result_factory import write_demo

from edgeforge.report.plots import PRECISION_COLORS
from edgeforge.report.report import write_report

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


def _near(pixels, hex_color: str, tol: int = 12) -> int:
    """How many pixels lie within ``tol`` of ``hex_color`` in every channel."""
    import numpy as np

    target = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels - target) <= tol).all(axis=-1).sum())


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_report_html_renders_offline_with_plots(tmp_path):
    import numpy as np
    from PIL import Image

    files = write_demo(tmp_path / "results")
    html = write_report(files, tmp_path / "out")["html"]
    png = tmp_path / "report.png"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--host-resolver-rules=MAP * ~NOTFOUND",          # nothing can be fetched: the page must not need to
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", "--window-size=1280,2000",
           html.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert png.is_file() and png.stat().st_size > 20_000, proc.stderr[-2000:]

    img = Image.open(png).convert("RGB")
    assert img.size == (1280, 2000)
    pixels = np.asarray(img, dtype=int).reshape(-1, 3)
    assert len(np.unique(pixels, axis=0)) > 300             # anti-aliased text and plots, not a blank page
    assert (pixels.sum(axis=1) < 740).mean() > 0.04         # a good part of the page is ink
    # the precision colours appear only where matplotlib drew boxes, markers and bars (the
    # latency and INT8 plots; the artifact sizes' bars are folded under <details>)
    for precision in ("fp32", "int8"):
        hits = _near(pixels, PRECISION_COLORS[precision])
        assert hits > 400, (precision, hits)

    keep = os.environ.get("EDGEFORGE_REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(png, keep)


# measured in the page itself, then written into the DOM for --dump-dom to carry out: the
# page's own horizontal overflow, any scrolling box that overflows (details opened too), and
# where the "What to ship" table ends against the window's height
_MEASURE = """<script>
var d = document.documentElement, out = {};
out.bottom = document.getElementById("ship-table").getBoundingClientRect().bottom;
out.height = window.innerHeight; out.width = window.innerWidth;
document.querySelectorAll("details").forEach(function (x) { x.open = true; });
out.page = [d.scrollWidth, d.clientWidth];
out.wide = Array.prototype.slice.call(document.querySelectorAll(".scroll, table")).filter(function (x) {
  return x.scrollWidth > x.clientWidth + 1 || x.getBoundingClientRect().right > d.clientWidth + 1;
}).map(function (x) { return x.id || x.className; });
document.body.setAttribute("data-measure", JSON.stringify(out));
</script></body>"""


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_the_verdict_is_in_the_first_screen_and_nothing_scrolls_sideways(tmp_path):
    """At 1280 px: 'What to ship' ends within the first screen, and neither the page nor any
    table (details opened) is wider than the window (issue 46). A detector and a segmenter
    among the runs, so their metric columns are in the tables."""
    import html as _html
    import json
    import re

    files = write_demo(tmp_path / "results", tasks=True)
    page = write_report(files, tmp_path / "out")["html"]
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", _MEASURE))
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
           "--disable-background-networking", "--disable-component-update",
           "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'profile'}",
           "--window-size=1280,900", "--dump-dom", probe.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    found = re.search(r'data-measure="([^"]*)"', proc.stdout)
    assert found, proc.stderr[-2000:]
    m = json.loads(_html.unescape(found.group(1)))
    assert m["width"] == 1280
    assert 0 < m["bottom"] <= m["height"], m          # the verdicts, without scrolling
    assert m["page"][0] <= m["page"][1], m            # no horizontal scrollbar
    assert m["wide"] == [], m
