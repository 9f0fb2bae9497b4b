"""issue 19, --out: only a previous edgeforge build is replaced; any other existing path, a path
below a file, a read-only filesystem: exit 2, one line naming it, nothing on disk changed and
no ``.X.tmp-*``/``.X.old-*`` sibling left. Builds respect the umask. Through the real CLI."""
from __future__ import annotations

import os
import stat

import pytest

from helpers import copy_project, readonly_tmpfs, run_cli
from test_errors import assert_clean_failure


@pytest.fixture
def project(digits_project, tmp_path):
    return copy_project(digits_project, tmp_path / "proj")


def _siblings(out):
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def _snapshot(root):
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))} if root.is_dir() else root.read_bytes()


def test_out_that_is_a_directory_of_notes_is_refused(project, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("a week of notes\n")
    before = _snapshot(out)
    res = run_cli("build", str(project), "--target", "jetson-orin", "--out", str(out))
    assert_clean_failure(res, 2, f"--out {out} exists and is a directory, not an edgeforge build")
    assert _snapshot(out) == before and _siblings(out) == []


def test_out_that_is_a_file_is_refused(project, tmp_path):
    out = tmp_path / "thesis.pdf"
    out.write_bytes(b"%PDF-1.7 precious")
    res = run_cli("build", str(project), "--target", "jetson-orin", "--out", str(out))
    assert_clean_failure(res, 2, f"--out {out} exists and is a file, not an edgeforge build")
    assert out.read_bytes() == b"%PDF-1.7 precious" and _siblings(out) == []


def test_out_with_a_foreign_manifest_is_refused(project, tmp_path):
    out = tmp_path / "other"
    out.mkdir()
    (out / "manifest.json").write_text('{"schema": "someone.else/1"}')
    res = run_cli("build", str(project), "--target", "jetson-orin", "--out", str(out))
    assert_clean_failure(res, 2, "not an edgeforge build")
    assert (out / "manifest.json").read_text() == '{"schema": "someone.else/1"}'


def test_out_below_a_file_is_refused(project, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    out = f / "sub" / "build"
    res = run_cli("build", str(project), "--target", "jetson-orin", "--out", str(out))
    assert_clean_failure(res, 2, f"--out {out} is below {f}, which is not a directory")
    assert f.read_text() == "x"


@pytest.fixture
def readonly_dir(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root (chmod 0555 does not stop root)")
    with readonly_tmpfs(tmp_path / "ro", {"keep.txt": "kept"}) as d:
        yield d


def test_out_on_a_read_only_filesystem_is_refused(project, readonly_dir):
    out = readonly_dir / "build"
    res = run_cli("build", str(project), "--target", "jetson-orin", "--out", str(out))
    assert_clean_failure(res, 2, f"--out {out}: cannot write in {readonly_dir}", "Read-only file system",
                         out=out)
    assert (readonly_dir / "keep.txt").read_text() == "kept"


def test_out_that_is_a_read_only_mount_point_is_refused(project, readonly_dir):
    res = run_cli("build", str(project), "--target", "jetson-orin", "--out", str(readonly_dir))
    assert_clean_failure(res, 2, f"--out {readonly_dir} exists and is a directory, not an edgeforge build")
    assert _siblings(readonly_dir) == [] and (readonly_dir / "keep.txt").read_text() == "kept"


def test_build_respects_the_umask_and_replaces_only_a_build(project, tmp_path):
    out = tmp_path / "out"
    old = os.umask(0o022)
    try:
        ok = run_cli("build", str(project), "--target", "jetson-orin", "--out", str(out))
    finally:
        os.umask(old)
    assert ok.returncode == 0, ok.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "manifest.json").stat().st_mode) == 0o644
    assert all(stat.S_IMODE(p.stat().st_mode) in (0o755, 0o644) for p in out.rglob("*"))
    # a previous build is replaced whole, and no sibling is left
    (out / "stale.txt").write_text("from the last build")
    again = run_cli("build", str(project), "--target", "jetson-orin", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert not (out / "stale.txt").exists() and _siblings(out) == []


@pytest.mark.parametrize("kind", ["directory", "file"])
def test_precision_auto_refuses_a_foreign_out_before_building_the_candidates(project, tmp_path, kind):
    """`build --precision auto` builds its candidates in a temporary directory and then the
    chosen one into --out: the rule of --out is checked first, not after minutes of builds."""
    out = tmp_path / "mine"
    if kind == "directory":
        out.mkdir()
        (out / "notes.txt").write_text("a week of notes\n")
    else:
        out.write_text("a week of notes\n")
    before = _snapshot(out)
    res = run_cli("build", str(project), "--target", "linux-x86", "--precision", "auto", "--out", str(out))
    assert_clean_failure(res, 2, f"--out {out} exists and is a {kind}, not an edgeforge build")
    assert _snapshot(out) == before and _siblings(out) == []
    assert "precision auto: building" not in res.stdout + res.stderr
