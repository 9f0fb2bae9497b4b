"""issue 19, crafted build directories: a manifest whose paths leave the build directory (``..``,
an absolute path, a symlink), whose artifact digest would name a remote directory outside the
workdir, or that does not match the schema: bench and deploy exit 2 naming the field, before
any connection (so nothing is read from outside or written on a device). The one check is
``edgeforge.device.link.settings.validate_build`` (bench, fleet bench, deploy, load, and run/sweep
through Bench). Through the real CLI."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from helpers import copy_project, readonly_tmpfs, run_cli
from test_errors import assert_clean_failure


@pytest.fixture(scope="module")
def built(digits_project, tmp_path_factory):
    root = tmp_path_factory.mktemp("crafted")
    project = copy_project(digits_project, root / "proj")
    out = root / "build"
    res = run_cli("build", str(project), "--target", "jetson-orin", "--out", str(out))
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture
def crafted(built, tmp_path):
    b = tmp_path / "build"
    shutil.copytree(built, b)
    inv = tmp_path / "devices.toml"
    inv.write_text('[devices.orin]\nhost = "127.0.0.1"\nport = 1\ntarget = "jetson-orin"\n'
                   'workdir = "/tmp/edgeforge-crafted"\n')
    (tmp_path / "PLANTED.npz").write_bytes(b"planted")
    return b, inv


def _edit(build, fn):
    m = json.loads((build / "manifest.json").read_text())
    fn(m)
    (build / "manifest.json").write_text(json.dumps(m))


def _bench(build, inv, tmp_path):
    return run_cli("bench", str(build), "--device", "orin", "--inventory", str(inv),
                   "--results", str(tmp_path / "results"))


def _nothing_written(tmp_path):
    assert not (tmp_path / "results").exists()
    assert (tmp_path / "PLANTED.npz").read_bytes() == b"planted"


def test_reference_path_with_dotdot_is_refused(crafted, tmp_path):
    build, inv = crafted
    _edit(build, lambda m: m["reference"].__setitem__("inputs", "reference/../../PLANTED.npz"))
    res = _bench(build, inv, tmp_path)
    assert_clean_failure(res, 2, "field reference.inputs = 'reference/../../PLANTED.npz'",
                         "not a relative path inside the build directory")
    _nothing_written(tmp_path)


def test_reference_image_path_with_dotdot_is_refused(crafted, tmp_path):
    """bench --end-to-end's raw images (reference.images) are paths of the build too."""
    build, inv = crafted
    _edit(build, lambda m: m["reference"].__setitem__("images", ["reference/../../PLANTED.npz"]))
    res = _bench(build, inv, tmp_path)
    assert_clean_failure(res, 2, "field reference.images[0] = 'reference/../../PLANTED.npz'",
                         "not a relative path inside the build directory")
    _nothing_written(tmp_path)


def test_absolute_artifact_path_is_refused(crafted, tmp_path):
    build, inv = crafted
    _edit(build, lambda m: m["artifact"].__setitem__("path", str(tmp_path / "PLANTED.npz")))
    assert_clean_failure(_bench(build, inv, tmp_path), 2, "field artifact.path")
    _nothing_written(tmp_path)


def test_symlink_out_of_the_build_is_refused(crafted, tmp_path):
    build, inv = crafted
    ref = build / "reference" / "device_outputs.npz"
    ref.unlink()
    ref.symlink_to(tmp_path / "PLANTED.npz")
    res = _bench(build, inv, tmp_path)
    assert_clean_failure(res, 2, "field reference.outputs = 'reference/device_outputs.npz' leads outside "
                                 "the build directory")
    _nothing_written(tmp_path)


def test_digest_that_would_name_a_remote_dir_outside_the_workdir(crafted, tmp_path):
    build, inv = crafted
    _edit(build, lambda m: m["artifact"].__setitem__("sha256", "../../../home/pi/.ssh"))
    assert_clean_failure(_bench(build, inv, tmp_path), 2, "field artifact.sha256: must be a sha256")
    _nothing_written(tmp_path)


def test_manifest_not_matching_the_schema(crafted, tmp_path):
    build, inv = crafted
    _edit(build, lambda m: m.__setitem__("precision", "int4"))
    assert_clean_failure(_bench(build, inv, tmp_path), 2, "manifest.json: field precision")
    _edit(build, lambda m: (m.__setitem__("precision", "fp32"), m.__setitem__("artifact", "model.onnx")))
    assert_clean_failure(_bench(build, inv, tmp_path), 2, "manifest.json: field artifact")
    _nothing_written(tmp_path)


def test_fleet_bench_and_deploy_refuse_it_too(crafted, tmp_path):
    build, inv = crafted
    _edit(build, lambda m: m["reference"].__setitem__("outputs", "../PLANTED.npz"))
    fleet = run_cli("bench", str(build), "--devices", "all", "--inventory", str(inv),
                    "--results", str(tmp_path / "results"))
    assert_clean_failure(fleet, 2, "field reference.outputs = '../PLANTED.npz'")
    dep = run_cli("deploy", str(build), "--devices", "all", "--inventory", str(inv))
    assert_clean_failure(dep, 2, "field reference.outputs = '../PLANTED.npz'")
    _nothing_written(tmp_path)


def test_read_only_results_directory_is_refused_before_measuring(crafted, tmp_path):
    """Checked before connecting: the device here does not even listen, and the error is the
    results directory's, not the device's (no bench runs only to lose its measurement)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root (chmod 0555 does not stop root)")
    build, inv = crafted
    with readonly_tmpfs(tmp_path / "ro", {"old.json": "{}"}) as ro:
        res = run_cli("bench", str(build), "--device", "orin", "--inventory", str(inv), "--results", str(ro))
        assert_clean_failure(res, 2, f"--results {ro}: cannot write in {ro} (Read-only file system)",
                             "pass --results a writable directory")
        assert sorted(p.name for p in ro.iterdir()) == ["old.json"]
        assert "127.0.0.1" not in res.stderr + res.stdout      # no connection was tried
        fleet = run_cli("bench", str(build), "--devices", "all", "--inventory", str(inv), "--results", str(ro))
        assert_clean_failure(fleet, 2, f"--results {ro}: cannot write in {ro}")
        assert "127.0.0.1" not in fleet.stderr + fleet.stdout
