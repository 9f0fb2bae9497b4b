"""issue 44: blame stays with the build. bench --end-to-end checks the build's pipeline.json and
raw images on the host, before connecting: an unknown step, a two-value mean for three channels,
a 60000 x 60000 resize, an image over the runner's 16 MiB cap. Each is exit 2 naming the file and
the field, nothing reaches the device (no workdir, no upload), and three of them in a row leave
devices.state.json as it was: a good build benches right after. Real CLI, real sshd device."""
from __future__ import annotations

import json
import shutil
import sys

import pytest
from task_projects import photo_project

pytestmark = pytest.mark.device


@pytest.fixture(scope="module")
def photo_build(tmp_path_factory):
    from edgeforge import api

    root = tmp_path_factory.mktemp("pipe")
    b = api.build(photo_project(root / "proj"), "linux-x86", precision="fp32", out=root / "build")
    assert b.verify_status == "passed"
    return b.out_dir


def _crafted(build, tmp_path, edit):
    out = tmp_path / "crafted"
    shutil.copytree(build, out)
    doc = json.loads((out / "pipeline.json").read_text())
    edit(doc)
    (out / "pipeline.json").write_text(json.dumps(doc))
    return out


def _step(doc, op):
    return next(st for st in doc["preprocess"] if st["op"] == op)


def _bench(cli, lab, build, inv):
    code, out, err = cli("bench", build, "--device", "local", "--inventory", inv, "--results", lab.results,
                         "--runs", "4", "--warmups", "1", "-q", "--end-to-end")
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert "Traceback" not in out + err and len(errors) == 1, err
    return code, errors[0]


def _state(inv):
    p = inv.with_name(inv.stem + ".state.json")
    return p.read_text() if p.exists() else None


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["preprocess"].insert(2, {"op": "sharpen", "amount": 2}),
     "field preprocess.2: unknown step 'sharpen' (the runner's: decode, resize"),
    (lambda d: _step(d, "normalize").__setitem__("mean", [0.5, 0.5]),
     "field preprocess.4.mean: List should have at least 3 items"),
    (lambda d: _step(d, "resize").__setitem__("size", [60000, 60000]),
     "field preprocess.1.size.0: Input should be less than or equal to 8192"),
    (lambda d: d["postprocess"].__setitem__("op", "argmax"), "field postprocess.op: unknown op 'argmax'"),
], ids=["unknown-step", "two-value-mean", "60000-resize", "unknown-post-op"])
def test_a_pipeline_the_runner_cannot_use_is_refused_on_the_host(cli, lab, photo_build, tmp_path, edit, says):
    build = _crafted(photo_build, tmp_path, edit)
    inv = lab.inventory(python=sys.executable)       # the host venv's Python: Pillow
    before = _state(inv)
    for _ in range(3):
        code, line = _bench(cli, lab, build, inv)
        assert code == 2, line
        assert f"{build / 'pipeline.json'}: {says}" in line, line
    assert not lab.workdir.exists(), "something reached the device"
    assert _state(inv) == before and lab.result_files() == []


def test_an_image_over_the_cap_is_refused_before_the_upload(cli, lab, photo_build, tmp_path):
    build = _crafted(photo_build, tmp_path, lambda d: None)
    img = build / "reference" / "images" / "image_00.jpg"
    with img.open("ab") as fh:                  # a valid JPEG with 17 MiB of trailing bytes
        fh.truncate(img.stat().st_size + (17 << 20))
    inv = lab.inventory(python=sys.executable)       # the host venv's Python: Pillow
    code, line = _bench(cli, lab, build, inv)
    assert code == 2 and "image reference/images/image_00.jpg is" in line and "over the runner's 16 MiB cap" in line
    assert not lab.workdir.exists() and _state(inv) is None
    # a picture the pipeline would blow up: 8 x 2000 px, resize_short 1024 -> 1024 x 256000
    from PIL import Image

    build2 = _crafted(photo_build, tmp_path / "two", lambda d: d["preprocess"].__setitem__(
        1, {"op": "resize_short", "size": 1024, "interpolation": "bilinear"}) or d["preprocess"].insert(
        2, {"op": "crop", "size": [48, 64]}))
    Image.new("RGB", (8, 2000)).save(build2 / "reference" / "images" / "image_01.jpg")
    code, line = _bench(cli, lab, build2, inv)
    assert code == 2 and "image reference/images/image_01.jpg (8 x 2000) reaches 262144000 pixels" in line, line
    assert not lab.workdir.exists()
    # the device was never charged: the untouched build benches
    code, out, err = cli("bench", photo_build, "--device", "local", "--inventory", inv, "--results", lab.results,
                         "--runs", "4", "--warmups", "1", "-q", "--end-to-end")
    assert code == 0, err
