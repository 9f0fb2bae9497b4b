"""bench --end-to-end on the loopback device: each of the build's raw photos is decoded,
pre-processed (the pipeline verify checked), run and post-processed on the device, every stage
timed. The result holds per-stage p50/p99 and the share outside the model; the report draws
a stacked bar per run; profile says what dominates. A device without Pillow is one line, exit 4.

These are the loopback device's (this host's) timings: they check the mechanism, not a board's
performance."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from task_projects import photo_project

from result_factory import read_result_doc

pytestmark = pytest.mark.device

STAGES = ("decode", "preprocess", "infer", "postprocess")


@pytest.fixture(scope="module")
def photo_build(tmp_path_factory):
    from edgeforge import api

    root = tmp_path_factory.mktemp("e2e")
    b = api.build(photo_project(root / "proj"), "linux-x86", precision="fp32", out=root / "build")
    assert b.verify_status == "passed"
    return b


def _python_without(lab, name: str, keep: tuple[str, ...]) -> Path:
    """A device Python that sees only ``keep`` of the venv's site-packages."""
    import numpy

    site = Path(numpy.__file__).parents[1]
    only = lab.root / f"only-{name}"
    only.mkdir()
    for entry in site.iterdir():
        if entry.name.split("-")[0].split(".")[0] in keep:
            (only / entry.name).symlink_to(entry)
    return lab.script(f"python-{name}", f'#!/bin/sh\nPYTHONPATH={only} exec {sys.executable} -S "$@"\n')


def test_the_build_carries_its_images(photo_build):
    rels = photo_build.manifest["reference"]["images"]
    assert len(rels) == 4 and all((photo_build.out_dir / r).is_file() for r in rels)
    assert rels[0] == "reference/images/image_00.jpg"


def test_bench_end_to_end_writes_per_stage_figures_and_the_report_draws_them(cli, lab, photo_build, tmp_path):
    inv = lab.inventory(python=sys.executable)        # the host venv's Python: Pillow (and OpenCV)
    code, out, err = cli("bench", photo_build.out_dir, "--device", "local", "--inventory", inv,
                         "--results", lab.results, "--runs", "12", "--warmups", "2", "--end-to-end")
    assert code == 0, err + out
    [path] = lab.result_files()
    e = read_result_doc(path)["end_to_end"]
    assert e["images"] == 4 and e["runs"] == 12 and e["decoder"] in ("opencv", "pillow")
    for st in STAGES:
        s, raw = e["stages"][st], e["samples_ms"][st]
        assert len(raw) == 12 and all(v > 0 for v in raw)
        assert 0 < s["p50_ms"] <= s["p99_ms"] == max(raw)
    totals = [sum(parts) for parts in zip(*(e["samples_ms"][st] for st in STAGES))]
    assert e["total"]["p99_ms"] == pytest.approx(max(totals))
    outside = sum(sum(e["samples_ms"][st]) for st in ("decode", "preprocess", "postprocess"))
    assert e["ai_tax"] == pytest.approx(outside / sum(totals))
    assert e["postprocess"] == "topk"          # a classifier's default post-processing
    assert "end to end" in out and "outside the model" in out

    code, out, err = cli("profile", str(path))
    assert code == 0, err + out
    assert ("pre/post-processing dominates" in out) == (e["ai_tax"] > 0.5), out
    assert all(len(ln) <= 80 for ln in out.splitlines()), out

    code, out, err = cli("report", str(path), "--out", tmp_path / "report")
    assert code == 0, err + out
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## End to end" in md and "decode p50/p99" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| R1 ") and "I" in ln.split("|")[-2])
    assert f"{e['stages']['decode']['p50_ms']:.3f} / {e['stages']['decode']['p99_ms']:.3f}" in row
    html = (tmp_path / "report" / "report.html").read_text()
    section = html[html.index('id="e2e"'):]
    assert "<svg" in section[:section.index("<h2", 10)] and "outside the model" in section


def test_without_opencv_the_device_decodes_with_pillow(cli, lab, photo_build):
    py = _python_without(lab, "no-cv2", ("numpy", "onnxruntime", "PIL", "pillow", "flatbuffers", "packaging",
                                         "protobuf", "google", "coloredlogs", "humanfriendly", "sympy", "mpmath"))
    code, out, err = cli("bench", photo_build.out_dir, "--device", "local", "--inventory", lab.inventory(python=str(py)),
                         "--results", lab.results, "--runs", "4", "--warmups", "1", "-q", "--end-to-end")
    assert code == 0, err + out
    [path] = lab.result_files()
    assert read_result_doc(path)["end_to_end"]["decoder"] == "pillow"


def test_a_device_without_pillow_is_one_line_exit_4(cli, lab, photo_build):
    py = _python_without(lab, "no-pil", ("numpy", "onnxruntime", "flatbuffers", "packaging", "protobuf",
                                         "google", "coloredlogs", "humanfriendly", "sympy", "mpmath"))
    code, out, err = cli("bench", photo_build.out_dir, "--device", "local", "--inventory", lab.inventory(python=str(py)),
                         "--results", lab.results, "--runs", "4", "-q", "--end-to-end")
    assert code == 4, err + out
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) <= 2 and lines[0].startswith("error: device local: runtime missing: Pillow"), err
    assert any("devices setup local" in ln for ln in lines), err


def test_a_build_without_a_pipeline_is_refused_before_connecting(cli, lab, photo_build, tmp_path):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(photo_build.out_dir, bare)
    (bare / "pipeline.json").unlink()
    code, out, err = cli("bench", bare, "--device", "local", "--inventory", lab.inventory(),
                         "--results", lab.results, "--runs", "4", "-q", "--end-to-end")
    assert code == 2, err + out
    assert "bench --end-to-end" in err and "no readable pipeline.json" in err and "[preprocess]" in err
    assert not lab.result_files()


# make test-slow (16 s in a 28-min make test, its own build): the default suite keeps the
# end-to-end bench above and the folded artifact on the host (tests/integration/test_fold.py)
@pytest.mark.slow
def test_a_folded_build_end_to_end_feeds_the_decoded_bytes(cli, lab, tmp_path_factory):
    """fold = true: the device pipeline stops at the resize, the artifact takes the uint8 bytes."""
    import numpy as np
    from PIL import Image

    from edgeforge import api

    root = photo_project(tmp_path_factory.mktemp("e2e-fold") / "proj")
    toml = (root / "edgeforge.toml").read_text().replace("[preprocess]\n", "[preprocess]\nfold = true\n")
    (root / "edgeforge.toml").write_text(toml)
    x = np.stack([np.asarray(Image.open(p).convert("RGB").resize((64, 48), Image.BILINEAR), np.uint8)
                  for p in sorted((root / "data" / "images").iterdir())])
    np.savez(root / "data" / "calib.npz", image=x)
    np.savez(root / "data" / "eval.npz", image=x)
    b = api.build(root, "linux-x86", precision="fp32", out=root.parent / "build")
    code, out, err = cli("bench", b.out_dir, "--device", "local", "--inventory", lab.inventory(python=sys.executable),
                         "--results", lab.results, "--runs", "4", "--warmups", "1", "-q", "--end-to-end")
    assert code == 0, err + out
    [path] = lab.result_files()
    r = read_result_doc(path)
    assert r["end_to_end"]["runs"] == 4 and r["drift"]["top1_agreement"] == 1.0
    assert r["drift"]["rel_max_abs_error"] <= 1e-4
