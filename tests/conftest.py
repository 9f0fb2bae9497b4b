"""Shared fixtures: a trained copy of the digits example, an isolated build cache."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["FLAGS_enable_pir_api"] = "0"

# The signal tests send SIGINT and SIGHUP to edgeforge children, which inherit this process's
# dispositions. A suite started in the background by a non-interactive shell (`make test &`:
# SIGINT ignored) or under nohup (SIGHUP ignored) would hand them an ignored signal, which
# edgeforge rightly keeps ignored (stop_signals). The suite tests the default dispositions.
for _sig in (signal.SIGINT, signal.SIGHUP):
    if signal.getsignal(_sig) is signal.SIG_IGN:
        signal.signal(_sig, signal.default_int_handler if _sig == signal.SIGINT else signal.SIG_DFL)

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "digits"


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Every test session gets its own build cache unless EDGEFORGE_CACHE is set by the caller."""
    from edgeforge.toolchain import toolchains_dir

    # the Paddle Lite toolchain stays where it is installed (under the user's, or CI's, cache),
    # also for the tests that point a child's EDGEFORGE_CACHE elsewhere (the zoo's CLI cells)
    os.environ.setdefault("EDGEFORGE_TOOLCHAINS", str(toolchains_dir()))
    if "EDGEFORGE_CACHE" not in os.environ:
        os.environ["EDGEFORGE_CACHE"] = str(tmp_path_factory.mktemp("edgeforge-cache"))
    yield


@pytest.fixture
def cli(capsys):
    """Run ``edgeforge ARGS`` in this process; returns (exit code, stdout, stderr)."""
    from edgeforge.cli import main

    def run(*args):
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="session")
def digits_project(tmp_path_factory) -> Path:
    """A private copy of examples/digits with trained weights and data (trained once per session)."""
    root = tmp_path_factory.mktemp("digits") / "digits"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    if not (root / "digits.pdparams").is_file() or not (root / "data" / "eval.npz").is_file():
        subprocess.run([sys.executable, str(root / "train.py"), "--out", str(root)], check=True,
                       capture_output=True, text=True)
    return root


# ---------------------------------------------------------------- machines without Paddle Lite
# paddlelite's x86-64 wheels stop at cp310; a machine with no Python 3.10 at all (stock Debian 12,
# Ubuntu 24.04) cannot have the Lite toolchain, and Lite targets then stop with exit 2 and one
# line (tests/integration/test_toolchain.py pins that). A test that needs the toolchain says so
# where it is defined, with ``@pytest.mark.needs_lite`` (or a ``pytest.param(..., marks=...)``),
# or through the ``lite_toolchain`` fixture; where find_lite() finds none it is skipped before it
# runs, with the reason. A test that does not say so and meets the toolchain line fails.
NO_LITE = ("no Paddle Lite toolchain here (it needs a Python 3.10: "
           "`edgeforge toolchain install lite --python PATH`)")


def _lite_available() -> bool:
    from edgeforge.toolchain import find_lite

    return find_lite() is not None


def pytest_collection_modifyitems(items):
    marked = [item for item in items if item.get_closest_marker("needs_lite")]
    if marked and not _lite_available():
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=NO_LITE))


@pytest.fixture(scope="session")
def lite_toolchain():
    """The Paddle Lite toolchain; the test is skipped (before it runs) where there is none."""
    from edgeforge.toolchain import find_lite

    tc = find_lite()
    if tc is None:
        pytest.skip(NO_LITE)
    return tc
