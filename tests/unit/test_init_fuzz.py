"""issue 44, init, the class not the instances: hostile directory names, input names, shapes,
dtypes, project names, numeric flags and tasks thrown at ``edgeforge init`` through the CLI
(``edgeforge.cli.main``, in-process; ``--input`` given, so no child process). Only documented exit
codes, at most one ``error:`` line, never a traceback or a warning; nothing is written outside the project
directory, a failed init writes nothing at all, and what a successful one writes is a project
the build loads with the inputs asked for. A bounded example count by default; many more under
``-m slow``."""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import tomli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from edgeforge.cli.main import main
from edgeforge.project import load_project

DOCUMENTED = {0, 1, 2, 3, 4, 130}
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
MANY = settings(SETTINGS, max_examples=1500)

HOSTILE = ['a"b', "x\n[task]", 'x"\nkind = "ctc', "labels", "", " ", "x y", "\x00", "é", "../x", "a\\b",
           "$(id)", "x" * 200, "y" * 300, "[model]", "#", "'''"]
names = st.one_of(st.sampled_from(["x", "image", "_a.b/c:d-0", *HOSTILE]), st.text(max_size=12))
dims = st.one_of(st.integers(-3, 64), st.integers(-3, 10**25),
                 st.sampled_from(["1e19", "nan", "inf", "x", "", " 8", "0x10", "-0"]))
dtypes = st.sampled_from(["float32", "float16", "int64", "int32", "uint8", "float64", "bool", "", "int8", "f4"])
numbers = st.one_of(st.floats().map(repr), st.sampled_from(["nan", "-inf", "1e400", "0", "0.5,0.5", "1,2,3", ""]),
                    st.text(max_size=6))


@st.composite
def invocations(draw) -> tuple[str, list[str]]:
    """A directory name (relative, kept inside the sandbox) and init's flags after it."""
    rel = draw(st.one_of(st.sampled_from(HOSTILE), st.text(min_size=1, max_size=12)))
    shape = ",".join(str(d) for d in draw(st.lists(dims, min_size=0, max_size=5)))
    spec = f"{draw(names)}:{shape}" + draw(st.one_of(st.just(""), dtypes.map(lambda d: ":" + d)))
    good = draw(st.booleans())
    flags = ["--factory", "m:Net", "--input", "x:-1,1,8,8" if good else spec]
    fine = {"--name": st.sampled_from(["ok-name", "A.b_c-1", "9"]), "--mean": st.sampled_from(["0.5", "0", "-0.25"]),
            "--std": st.sampled_from(["0.5", "1", "1000"]), "--seed": st.integers(0, 10**6).map(str),
            "--task": st.sampled_from(["classification"]), "--weights": st.sampled_from(["w.pdparams", "../w"]),
            "--max-metric-drop": st.sampled_from(["0", "5", "100"])}
    for flag, values in (("--name", names), ("--mean", numbers), ("--std", numbers),
                         ("--seed", st.one_of(st.integers(-5, 10**20).map(str), numbers)),
                         ("--task", st.sampled_from(["classification", "detection", "segmentation", "ctc", "x"])),
                         ("--weights", names), ("--max-metric-drop", numbers)):
        how = draw(st.sampled_from(["skip", "fine", "skip", "hostile", "skip", "skip", "fine", "skip"]))
        if how != "skip":
            flags += [flag, draw(values if how == "hostile" else fine[flag])]
    data = draw(st.sampled_from([None, "DATA", "ARRS"]))
    if data:
        flags += ["--data", data]
    return rel, flags


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("init-fuzz")
    (root / "imgs").mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype="uint8"), "L").save(root / "imgs" / f"{i}.png")
    (root / "arrs").mkdir()
    np.save(root / "arrs" / "batch.npy", rng.normal(size=(4, 1, 8, 8)).astype("float32"))
    np.save(root / "arrs" / "one.npy", rng.integers(0, 9, size=(1, 8, 8)).astype("int64"))
    (root / "w").mkdir()
    return root


def _tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def _one(sandbox: Path, rel: str, flags: list[str]) -> None:
    rel = "/".join(p for p in rel.replace("\x00", "0").split("/") if p not in ("", ".", "..")) or "p"
    project = sandbox / "w" / rel
    folders = {"DATA": str(sandbox / "imgs"), "ARRS": str(sandbox / "arrs")}
    argv = ["init", str(project), *[folders.get(f, f) for f in flags]]
    before = _tree(sandbox)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("error")              # a warning would reach the user's terminal: a bug
        code = main(argv)
    try:
        assert code in DOCUMENTED and code != 70, (argv, err.getvalue())
        assert "Traceback" not in err.getvalue()
        assert err.getvalue().count("\n") <= 1, (argv, err.getvalue())
        new = _tree(sandbox) - before
        if code != 0:
            assert new == set(), (argv, err.getvalue(), new)
            return
        assert all(p == project or project in p.parents or p in project.parents for p in new), (argv, new)
        doc = tomli.loads((project / "edgeforge.toml").read_text())
        want = flags[flags.index("--input") + 1]
        (written,) = doc["model"]["inputs"]
        assert written["name"] == want.split(":")[0]
        if -1 not in written["shape"][1:]:
            assert load_project(project).spec.model.inputs[0].name == written["name"]
    finally:
        top = sandbox / "w" / rel.split("/")[0]
        if os.path.isdir(top):                     # False, not OSError, for a name too long
            shutil.rmtree(top)


@SETTINGS
@given(case=invocations())
def test_init_takes_hostile_flags_with_documented_exits_only(sandbox, case):
    _one(sandbox, *case)


@pytest.mark.slow
@MANY
@given(case=invocations())
def test_init_takes_hostile_flags_with_documented_exits_only_many(sandbox, case):
    _one(sandbox, *case)
