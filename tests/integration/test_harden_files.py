"""issue 23, files: every configuration file goes through one reader (not UTF-8, a BOM, a
directory, a huge file: exit 2, one line naming the file; a UTF-8 BOM is accepted), every
directory edgeforge writes through one check (a file, /sys, a read-only mount: exit 2 naming
the variable or flag that chose it; a warm read-only cache still serves its hits), target
numbers are capped and target errors name the real file, and two builds into one ``--out``
take turns (an flock on ``<out>.lock``). Through the real CLI."""
from __future__ import annotations

import codecs
import hashlib
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from helpers import readonly_tmpfs, run_cli, tiny_project
from test_errors import assert_clean_failure

REPO = Path(__file__).resolve().parents[2]
LINEAR = "import paddle\n\n\ndef build():\n    paddle.seed(0)\n    return paddle.nn.Linear(4, 2)\n"
DEVICES = ('[devices.pi]\nhost = "pi.local"\ntarget = "rpi4"\nworkdir = "/home/pi/edgeforge"\n')
FP32 = ("--target", "linux-x86", "--precision", "fp32")


def _root() -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only filesystem needs root (chmod 0555 does not stop root)")


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A tiny project and a cache holding its fp32 and fp16 linux-x86 builds."""
    base = tmp_path_factory.mktemp("harden-files")
    proj = tiny_project(base / "proj", "lin", LINEAR, [-1, 4], samples=8)
    cache = base / "cache"
    for prec in ("fp32", "fp16"):
        res = run_cli("build", str(proj), "--target", "linux-x86", "--precision", prec, "--out",
                      str(base / f"first-{prec}"), "-q", env={"EDGEFORGE_CACHE": str(cache)})
        assert res.returncode == 0, res.stderr
    return proj, cache


# ---------------------------------------------------------------- the one reader

def _three_loaders(tmp_path: Path, content: bytes, proj_dir: Path):
    """(the CLI argv, env, the file) for edgeforge.toml, devices.toml and a target TOML,
    each holding ``content``."""
    (proj_dir / "edgeforge.toml").write_bytes(content)
    inv = tmp_path / "devices.toml"
    inv.write_bytes(content)
    tdir = tmp_path / "targets"
    tdir.mkdir()
    (tdir / "rpi4.toml").write_bytes(content)
    return [(("build", str(proj_dir), *FP32, "--out", str(tmp_path / "out")), {}, proj_dir / "edgeforge.toml"),
            (("devices", "--inventory", str(inv)), {}, inv),
            (("targets", "show", "rpi4"), {"EDGEFORGE_TARGETS": str(tdir)}, tdir / "rpi4.toml")]


@pytest.mark.parametrize("content, where", [
    (b'name = "caf\xe9"\n', "byte 0xe9 at offset 11 (line 1)"),                 # latin-1
    (b'# ok\n\n[x]\nname = "\xc3"\n', "byte 0xc3 at offset 18 (line 4)"),      # a cut UTF-8 sequence
    ("name = 'x'\n".encode("utf-16"), "byte 0xff at offset 0 (line 1) (a UTF-16 file)"),
])
def test_a_file_that_is_not_utf8_is_one_line_naming_the_byte(tmp_path, content, where):
    proj = tmp_path / "proj"
    proj.mkdir()
    for argv, env, path in _three_loaders(tmp_path, content, proj):
        res = run_cli(*argv, env=env)
        assert_clean_failure(res, 2, str(path), "not UTF-8 text", where, "save it as UTF-8")


def test_a_utf8_bom_is_accepted_by_every_loader(tmp_path):
    bom = codecs.BOM_UTF8
    proj = tiny_project(tmp_path / "proj", "lin", LINEAR, [-1, 4], samples=8)
    (proj / "edgeforge.toml").write_bytes(bom + (proj / "edgeforge.toml").read_bytes())
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    # the project parses: the build gets as far as --out (which is refused)
    res = run_cli("build", str(proj), *FP32, "--out", str(blocker))
    assert_clean_failure(res, 2, f"--out {blocker} exists and is a file")
    inv = tmp_path / "devices.toml"
    inv.write_bytes(bom + DEVICES.encode())
    res = run_cli("devices", "--inventory", str(inv), "--json")
    assert res.returncode == 0, res.stderr
    assert "pi.local" in res.stdout
    tdir = tmp_path / "targets"
    tdir.mkdir()
    (tdir / "rpi4.toml").write_bytes(bom + (REPO / "targets" / "rpi4.toml").read_bytes())
    res = run_cli("targets", "show", "rpi4", "--json", env={"EDGEFORGE_TARGETS": str(tdir)})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["name"] == "rpi4"


def test_a_directory_a_huge_or_an_unreadable_file_as_inventory(tmp_path):
    d = tmp_path / "devices.toml"
    d.mkdir()
    res = run_cli("devices", "--inventory", str(d))
    assert_clean_failure(res, 2, str(d))
    huge = tmp_path / "huge.toml"
    with open(huge, "wb") as fh:                 # sparse: 17 MB of NULs on no disk
        fh.truncate(17 << 20)
    res = run_cli("devices", "--inventory", str(huge))
    assert_clean_failure(res, 2, f"device inventory {huge}: larger than 16 MB")
    res = run_cli("devices", "--inventory", "/proc/self/mem")       # a file read() refuses
    assert_clean_failure(res, 2, "device inventory /proc/self/mem: cannot be read (Input/output error)")


def test_toml_syntax_errors_name_the_file(tmp_path):
    inv = tmp_path / "devices.toml"
    inv.write_text("[devices.pi\nhost = 1\n")
    res = run_cli("devices", "--inventory", str(inv))
    assert_clean_failure(res, 2, f"device inventory {inv}: not valid TOML", "line 1")


def test_a_build_manifest_that_is_not_an_object_or_not_utf8(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    for content, message in [(b"[1, 2]", "not an edgeforge build manifest (a JSON list)"),
                             (b'{"schema": "caf\xe9"}', "not UTF-8 text: byte 0xe9 at offset 15")]:
        (build / "manifest.json").write_bytes(content)
        res = run_cli("bench", str(build), "--device", "nowhere")
        assert_clean_failure(res, 2, str(build / "manifest.json"), message)


# ---------------------------------------------------------------- targets

def _target(tmp_path: Path, old: str, new: str) -> Path:
    tdir = tmp_path / "my-targets"
    tdir.mkdir(exist_ok=True)
    text = (REPO / "targets" / "rpi4.toml").read_text()
    assert old in text
    (tdir / "rpi4.toml").write_text(text.replace(old, new, 1))
    return tdir


@pytest.mark.parametrize("old, new, key", [
    ("threads = 4", "threads = 100000000000", "runtime.threads"),
    ("threads = 4", "threads = 0", "runtime.threads"),
    ("runs = 100", "runs = 1000000000", "bench.runs"),
    ('warmups = "auto"', "warmups = -3", "bench.warmups"),
    ("command_timeout_s = 900", "command_timeout_s = inf", "bench.command_timeout_s"),
    ("connect_timeout_s = 15", "connect_timeout_s = nan", "bench.connect_timeout_s"),
    ("cores = 4", "cores = 99999", "hardware.cores"),
    ("calibration_batches = 10", "calibration_batches = 10000000", "quantization.calibration_batches"),
    ("batch_size = 32", "batch_size = 1000000", "quantization.batch_size"),
    ("max_accuracy_drop = 1.0", "max_accuracy_drop = inf", "quantization.max_accuracy_drop"),
])
def test_target_numbers_are_capped_naming_the_real_file_and_key(tmp_path, old, new, key):
    tdir = _target(tmp_path, old, new)
    for argv in (("targets", "show", "rpi4"), ("targets",)):
        res = run_cli(*argv, env={"EDGEFORGE_TARGETS": str(tdir)})
        line, _ = assert_clean_failure(res, 2, f"{tdir.resolve() / 'rpi4.toml'}: {key}:")
        assert "targets/rpi4.toml" not in line.replace(str(tdir.resolve()), "")


def test_a_target_name_mismatch_names_the_real_file(tmp_path):
    tdir = _target(tmp_path, 'name = "rpi4"', 'name = "rpi9"')
    res = run_cli("targets", "show", "rpi4", env={"EDGEFORGE_TARGETS": str(tdir)})
    assert_clean_failure(res, 2, f"{tdir.resolve() / 'rpi4.toml'}: name 'rpi9' does not match")


def test_edgeforge_targets_that_is_not_a_directory(tmp_path):
    f = tmp_path / "targets.txt"
    f.write_text("x")
    res = run_cli("targets", env={"EDGEFORGE_TARGETS": str(f)})
    assert_clean_failure(res, 2, f"EDGEFORGE_TARGETS={f}: not a directory")


# ---------------------------------------------------------------- directories edgeforge writes

def test_edgeforge_cache_at_a_file_below_a_file_in_sys_or_dangling(warm, tmp_path):
    proj, _ = warm
    f = tmp_path / "a-file"
    f.write_text("not a cache")
    cases = [(f, f"EDGEFORGE_CACHE={f}: exists and is a file, not a directory"),
             (f / "sub", f"EDGEFORGE_CACHE={f / 'sub'} is below {f}, which is not a directory"),
             (Path("/sys/edgeforge-cache"), "EDGEFORGE_CACHE=/sys/edgeforge-cache: cannot write in /sys"),
             (tmp_path / "dangling", f"EDGEFORGE_CACHE={tmp_path / 'dangling'}: a symlink to nothing")]
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    for cache, message in cases:
        out = tmp_path / "out"
        res = run_cli("build", str(proj), *FP32, "--out", str(out), env={"EDGEFORGE_CACHE": str(cache)})
        assert_clean_failure(res, 2, message, "set EDGEFORGE_CACHE to a writable directory", out=out)
    assert f.read_text() == "not a cache" and not Path("/sys/edgeforge-cache").exists()


@contextmanager
def _readonly_copy_of(src: Path, mountpoint: Path):
    """``src`` bind-mounted read-only on ``mountpoint`` (root only)."""
    mountpoint.mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(src), str(mountpoint)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(mountpoint)], check=True)
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=False)


def test_a_read_only_cache_serves_hits_and_refuses_a_miss(warm, tmp_path):
    """Decided: reading needs no write; the first miss is refused before its pass runs."""
    _root()
    proj, cache = warm
    with _readonly_copy_of(cache, tmp_path / "ro-cache") as ro:
        hit = run_cli("build", str(proj), *FP32, "--out", str(tmp_path / "hit"), "-q",
                      env={"EDGEFORGE_CACHE": str(ro)})
        assert hit.returncode == 0, hit.stderr
        m = json.loads((tmp_path / "hit" / "manifest.json").read_text())
        assert all(s["source"] == "local" for s in m["steps"]), m["steps"]
        # int8 is not in the cache: its first miss would have to write
        miss = run_cli("build", str(proj), "--target", "linux-x86", "--out", str(tmp_path / "miss"),
                       env={"EDGEFORGE_CACHE": str(ro)})
        assert_clean_failure(miss, 2, f"EDGEFORGE_CACHE={ro}: cannot write in {ro}",
                             "Read-only file system", out=tmp_path / "miss")
    with readonly_tmpfs(tmp_path / "empty-ro") as empty:
        res = run_cli("build", str(proj), *FP32, "--out", str(tmp_path / "o"), env={"EDGEFORGE_CACHE": str(empty)})
        assert_clean_failure(res, 2, f"EDGEFORGE_CACHE={empty}: cannot write in {empty}", out=tmp_path / "o")


def test_cache_clear_of_a_file_is_refused(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("keep")
    res = run_cli("cache", "clear", env={"EDGEFORGE_CACHE": str(f)})
    assert_clean_failure(res, 2, f"EDGEFORGE_CACHE={f}: exists and is a file")
    assert f.read_text() == "keep"


@pytest.fixture
def results(tmp_path):
    sys.path.insert(0, str(REPO / "tests"))
    from result_factory import write_demo

    d = tmp_path / "results"
    write_demo(d)
    return d


def test_report_out_on_a_read_only_mount_a_file_or_below_one(results, tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    for out, message in [(f, f"--out {f}: exists and is a file, not a directory"),
                         (f / "rep", f"--out {f / 'rep'} is below {f}, which is not a directory"),
                         (Path("/sys/edgeforge-report"), "--out /sys/edgeforge-report: cannot write in /sys")]:
        res = run_cli("report", str(results), "--out", str(out))
        assert_clean_failure(res, 2, message, "pass --out a writable directory")
    if os.geteuid() == 0:
        with readonly_tmpfs(tmp_path / "ro", {"keep.txt": "kept"}) as ro:
            for out in (ro, ro / "report"):
                res = run_cli("report", str(results), "--out", str(out))
                assert_clean_failure(res, 2, f"--out {out}: cannot write in {ro} (Read-only file system)")
            assert sorted(p.name for p in ro.iterdir()) == ["keep.txt"]
    ok = run_cli("report", str(results), "--out", str(tmp_path / "report"))
    assert ok.returncode == 0, ok.stderr


def test_toolchain_install_into_an_unwritable_directory_is_refused_first(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    for where, message in [(f, f"EDGEFORGE_TOOLCHAINS={f}: exists and is a file"),
                           (Path("/sys/edgeforge-tc"), "EDGEFORGE_TOOLCHAINS=/sys/edgeforge-tc: cannot write in /sys")]:
        res = run_cli("toolchain", "install", "lite", env={"EDGEFORGE_TOOLCHAINS": str(where)})
        assert_clean_failure(res, 2, message, "set EDGEFORGE_TOOLCHAINS to a writable directory")


# ---------------------------------------------------------------- the --out lock

def _holds_open(pid: int, path: Path) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            pass
    return False


def test_two_builds_into_one_out_take_turns(warm, tmp_path):
    """The test holds the lock until both builds wait on it (a waiter keeps the lock file
    open), then lets go: both succeed, one after the other, and --out holds one whole build."""
    import fcntl

    proj, cache = warm
    out = tmp_path / "out"
    lock = tmp_path / "out.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"%d\n" % os.getpid())
    exe = Path(sys.executable).with_name("edgeforge")
    env = dict(os.environ, EDGEFORGE_CACHE=str(cache), COLUMNS="120")
    builds = [subprocess.Popen([str(exe), "build", str(proj), "--target", "linux-x86", "--precision", prec,
                                "--out", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True) for prec in ("fp32", "fp16")]
    try:
        deadline = time.monotonic() + 120
        while not all(_holds_open(b.pid, lock) for b in builds):
            assert all(b.poll() is None for b in builds), [b.communicate() for b in builds]
            assert time.monotonic() < deadline, "the builds never reached the lock"
            time.sleep(0.1)
        time.sleep(0.5)
        assert all(b.poll() is None for b in builds) and not out.exists()
    finally:
        lock.unlink()
        os.close(fd)
    done = [b.communicate(timeout=300) for b in builds]
    for b, (_, stderr) in zip(builds, done):
        assert b.returncode == 0, stderr
        said = " ".join(stderr.split())            # the progress line folds at the width
        assert f"waiting for another build (pid {os.getpid()}) into {out}" in said, stderr
    m = json.loads((out / "manifest.json").read_text())
    art = out / m["artifact"]["path"]
    assert hashlib.sha256(art.read_bytes()).hexdigest() == m["artifact"]["sha256"]
    assert m["precision"] in ("fp32", "fp16")
    assert not lock.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_out_that_holds_the_current_directory_is_refused(warm, tmp_path):
    """`--out .` inside a previous build was exit 70 (the lock's and atomic_dir's empty name)."""
    proj, cache = warm
    first = tmp_path / "build"
    assert run_cli("build", str(proj), *FP32, "--out", str(first), "-q",
                   env={"EDGEFORGE_CACHE": str(cache)}).returncode == 0
    before = sorted(p.name for p in first.iterdir())
    for out, what in ((".", "is the current directory"), ("..", "is above the current directory")):
        res = run_cli("build", str(proj), *FP32, "--out", out, cwd=first, env={"EDGEFORGE_CACHE": str(cache)})
        assert_clean_failure(res, 2, f"--out {out} {what}, which the build would replace")
    assert sorted(p.name for p in first.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build"]


def test_a_held_out_lock_times_out_with_exit_2(warm, tmp_path):
    import fcntl

    proj, cache = warm
    out = tmp_path / "out"
    lock = tmp_path / "out.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"4242\n")
        res = run_cli("build", str(proj), *FP32, "--out", str(out),
                      env={"EDGEFORGE_CACHE": str(cache), "EDGEFORGE_OUT_LOCK_TIMEOUT": "0.5"})
        assert_clean_failure(res, 2, f"--out {out}: another build (pid 4242) still holds {lock} after 0.5 s",
                             out=out)
    finally:
        os.close(fd)
    res = run_cli("build", str(proj), *FP32, "--out", str(out), env={"EDGEFORGE_OUT_LOCK_TIMEOUT": "soon"})
    assert_clean_failure(res, 2, "EDGEFORGE_OUT_LOCK_TIMEOUT=soon")
