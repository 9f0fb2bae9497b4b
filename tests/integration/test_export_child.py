"""The export pass runs the user's model code in a child process: a factory that ends or
crashes its interpreter gives one error line naming the factory and what happened (exit 3),
and the calling process (the CLI, or a Python program using edgeforge.api) lives on."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import run_cli, tiny_project

from edgeforge import api
from edgeforge.errors import ExitCode, PassError


def _project(root: Path, body: str) -> Path:
    """A tiny project whose factory runs ``body`` before returning a Linear layer."""
    src = textwrap.dedent("""
        import os
        import signal
        import sys

        import paddle


        def build():
        {body}
            return paddle.nn.Linear(4, 2)
        """).format(body=textwrap.indent(textwrap.dedent(body).strip(), "    "))
    return tiny_project(root, "child", src, [-1, 4], samples=8)


def _one_error_line(res) -> str:
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, res.stderr
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    return errors[0]


def test_factory_calling_sys_exit_is_one_pass_error_line(tmp_path):
    root = _project(tmp_path / "proj", "sys.exit(7)")
    out = tmp_path / "out"
    res = run_cli("build", str(root), "--target", "linux-x86", "--precision", "fp32", "--out", str(out),
                  "--no-cache")
    line = _one_error_line(res)
    assert res.returncode == ExitCode.PASS == 3, res.stderr
    assert "pass export" in line and "factory 'model:build'" in line and "sys.exit(7)" in line, line
    assert not out.exists()


def test_factory_that_segfaults_is_one_pass_error_line(tmp_path):
    root = _project(tmp_path / "proj", "os.kill(os.getpid(), signal.SIGSEGV)")
    out = tmp_path / "out"
    res = run_cli("build", str(root), "--target", "linux-x86", "--precision", "fp32", "--out", str(out),
                  "--no-cache")
    line = _one_error_line(res)
    assert res.returncode == 3, res.stderr
    assert "pass export" in line and "factory 'model:build'" in line and "crashed (SIGSEGV)" in line, line


def test_api_caller_survives_a_factory_that_kills_its_process(tmp_path):
    """In-process API use: the crash and a hard exit stay in the child; this process goes on."""
    root = _project(tmp_path / "segv", "os.kill(os.getpid(), signal.SIGSEGV)")
    with pytest.raises(PassError, match=r"factory 'model:build' crashed \(SIGSEGV\)") as info:
        api.build(root, "linux-x86", precision="fp32", out=tmp_path / "o1", no_cache=True)
    assert info.value.exit_code == 3 and "\n" not in str(info.value)
    root = _project(tmp_path / "hard", "os._exit(5)")
    with pytest.raises(PassError, match=r"factory 'model:build' exited with code 5"):
        api.build(root, "linux-x86", precision="fp32", out=tmp_path / "o2", no_cache=True)
    # the same process still builds a healthy project
    ok = _project(tmp_path / "ok", "pass")
    res = api.build(ok, "linux-x86", precision="fp32", out=tmp_path / "o3", no_cache=True)
    assert res.manifest["verify"]["status"] == "passed"
    assert res.manifest["export"]["process"] == "child"
