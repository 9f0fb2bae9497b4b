"""deploy / rollback / releases against a real sshd on loopback.

v1 is the digits ONNX INT8 build; v2 the same model in a different artifact (another ONNX
doc_string, so another sha256); v3 an artifact whose drift is over the build's budget (a large
constant added to class 0's output, so it predicts 0 for everything).
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from edgeforge.cache import sha256_file

pytestmark = pytest.mark.device

NAME = "digits"


def make_variant(src: Path, dst: Path, mutate) -> Path:
    """A copy of the build ``src`` whose model.onnx ``mutate`` changed, its manifest re-digested."""
    import onnx

    shutil.copytree(src, dst)
    model = onnx.load(str(dst / "model.onnx"))
    mutate(model)
    onnx.save(model, str(dst / "model.onnx"))
    m = json.loads((dst / "manifest.json").read_text())
    m["artifact"]["sha256"] = sha256_file(dst / "model.onnx")
    m["artifact"]["size_bytes"] = (dst / "model.onnx").stat().st_size
    (dst / "manifest.json").write_text(json.dumps(m, indent=2))
    return dst


def _doc(text):
    def mutate(model):
        model.doc_string = text
    return mutate


def _over_budget(model):
    """Class 0's logit + 1000 on the model's output: every input comes out as 0 (accuracy far
    below budget, whatever the quantizer did to the last layer's scales)."""
    import numpy as np
    from onnx import helper, numpy_helper

    out = model.graph.output[0]
    n = out.type.tensor_type.shape.dim[-1].dim_value or 10
    producer = next(nd for nd in model.graph.node if out.name in nd.output)
    raw = f"{out.name}_before_test_bias"
    producer.output[list(producer.output).index(out.name)] = raw
    bias = np.zeros(n, np.float32)
    bias[0] = 1000.0
    model.graph.initializer.append(numpy_helper.from_array(bias, "edgeforge_test_bias"))
    model.graph.node.append(helper.make_node("Add", [raw, "edgeforge_test_bias"], [out.name]))


@pytest.fixture(scope="session", name="versions")
def _versions(builds, tmp_path_factory):
    root = tmp_path_factory.mktemp("versions")
    return {"v1": builds.onnx,
            "v2": make_variant(builds.onnx, root / "v2", _doc("digits v2")),
            "v3": make_variant(builds.onnx, root / "v3", _over_budget),
            "v4": make_variant(builds.onnx, root / "v4", _doc("digits v4"))}


def digest(build) -> str:
    return json.loads((Path(build) / "manifest.json").read_text())["artifact"]["sha256"]


def top(workdir: Path) -> Path:
    return Path(workdir) / "deploy" / NAME


def current_id(workdir) -> str | None:
    link = top(workdir) / "current"
    return os.path.basename(os.readlink(link)) if os.path.islink(link) else None


def current_digest(workdir) -> str:
    return sha256_file(top(workdir) / "current" / "model.onnx")


def history(workdir) -> list[dict]:
    p = top(workdir) / "history.jsonl"
    return [json.loads(ln) for ln in p.read_text().splitlines()] if p.exists() else []


def releases_on_disk(workdir) -> list[str]:
    d = top(workdir) / "releases"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


@pytest.fixture(autouse=True)
def _results(tmp_path, monkeypatch):
    """Deploy and rollback records go to a directory of the test's own."""
    monkeypatch.setenv("EDGEFORGE_RESULTS", str(tmp_path / "results"))
    return tmp_path / "results"


def _deploy(cli, build, inv, *extra, device="local"):
    return cli("deploy", build, "--device", device, "--inventory", inv, "-q", *extra)


def _releases_json(cli, inv, device="local"):
    code, out, err = cli("releases", NAME, "--device", device, "--inventory", inv, "--json")
    return code, json.loads(out), err


# ---------------------------------------------------------------- the main path

def test_deploy_v1_v2_rollback_and_releases(cli, lab, versions, _results):
    inv = lab.inventory()
    code, _, err = _deploy(cli, versions["v1"], inv)
    assert code == 0, err
    v1 = current_id(lab.workdir)
    assert v1.endswith(digest(versions["v1"])[:12]) and current_digest(lab.workdir) == digest(versions["v1"])
    rel = top(lab.workdir) / "releases" / v1
    names = {p.name for p in rel.iterdir()}
    assert {"model.onnx", "manifest.json", "reference", "release.json"} <= names
    [app] = [n for n in names if n.startswith("edgeforge_runner-") and n.endswith(".pyz")]      # the runner zipapp
    assert sha256_file(rel / app)[:12] == app[len("edgeforge_runner-"):-len(".pyz")]     # named by its digest

    code, out, err = _deploy(cli, versions["v2"], inv, "--json", "--reason", "ship v2")
    assert code == 0, err
    record = json.loads(out)
    assert record["schema"] == "edgeforge.deploy/1"
    [entry] = record["devices"]
    v2 = entry["release"]
    assert entry["status"] == "deployed" and entry["from"] == v1 and entry["current"] == v2
    assert entry["smoke"]["passed"] and entry["health"]["passed"]
    # the new artifact and its manifest went over the wire; the reference data was linked from v1
    # (the runner too, unless someone edited it in between: a shared working tree)
    tr = entry["transfer"]
    assert {"manifest.json", "model.onnx"} <= set(tr["files"])
    assert not {f for f in tr["files"] if not f.startswith("edgeforge_runner-")} - {"manifest.json", "model.onnx"}
    assert re.fullmatch(r"[0-9a-f]{64}", entry["runner_sha256"])         # the zipapp that ran the smoke test
    assert {"reference/device_inputs.npz", "reference/device_outputs.npz"} <= set(tr["reused"])
    assert current_id(lab.workdir) == v2 and current_digest(lab.workdir) == digest(versions["v2"])

    code, out, err = cli("rollback", NAME, "--device", "local", "--inventory", inv, "-q", "--json")
    assert code == 0, err
    assert json.loads(out)["devices"][0]["status"] == "rolled back"
    # every deploy and rollback left its record in the results directory, as printed
    records = [json.loads(p.read_text()) for p in _results.glob("*.json")]
    assert sorted(r["action"] for r in records) == ["deploy", "deploy", "rollback"], records
    assert record in records and json.loads(out) in records
    assert current_id(lab.workdir) == v1 and current_digest(lab.workdir) == digest(versions["v1"])

    code, st, err = _releases_json(cli, inv)
    assert code == 0, err
    assert [r["id"] for r in st["releases"]] == [v1, v2] and st["current"] == v1
    assert [(h["action"], h["from"], h["to"]) for h in st["history"]] == [
        ("deploy", None, v1), ("deploy", v1, v2), ("rollback", v2, v1)]
    assert st["history"][1]["reason"] == "ship v2"
    for h in st["history"]:
        assert {"time", "user", "host", "from", "to", "reason"} <= set(h)
    code, out, _ = cli("releases", NAME, "--device", "local", "--inventory", inv)
    assert code == 0 and v1 in out and v2 in out and "rollback" in out
    assert max(len(ln) for ln in out.splitlines()) <= 80

    code, _, err = cli("rollback", NAME, "--device", "local", "--inventory", inv, "-q", "--to", v2)
    assert code == 0, err
    assert current_id(lab.workdir) == v2


def test_smoke_failure_never_becomes_current(cli, lab, versions):
    inv = lab.inventory()
    for v in ("v1", "v2"):
        assert _deploy(cli, versions[v], inv)[0] == 0
    v2, before = current_id(lab.workdir), history(lab.workdir)
    code, _, err = _deploy(cli, versions["v3"], inv)
    assert code == 1, err
    assert "smoke test failed: accuracy drop" in err and "budget 1" in err
    assert current_id(lab.workdir) == v2 and current_digest(lab.workdir) == digest(versions["v2"])
    assert history(lab.workdir) == before
    assert not [r for r in releases_on_disk(lab.workdir) if r.endswith(digest(versions["v3"])[:12])]


def test_health_check_failure_switches_back(cli, lab, versions):
    """A device python whose runner fails when it runs through ``current``: the switch to v2 is
    taken back at once, recorded, exit 4."""
    hook = lab.root / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys\n"
        "if len(sys.argv) > 2 and sys.argv[1] == 'smoke' and sys.argv[2].endswith('/current'):\n"
        "    sys.exit(9)\n")
    py = lab.script("python-flaky", f'#!/bin/sh\nPYTHONPATH={hook} exec {lab.sshd.python} "$@"\n')
    assert _deploy(cli, versions["v1"], lab.inventory())[0] == 0
    v1 = current_id(lab.workdir)
    code, _, err = _deploy(cli, versions["v2"], lab.inventory(python=str(py)))
    assert code == 4, err
    assert "health check through current failed" in err and f"switched back to {v1}" in err
    assert current_id(lab.workdir) == v1
    h = history(lab.workdir)
    assert [x["action"] for x in h] == ["deploy", "deploy", "switch-back"]
    assert h[2]["from"] == h[1]["to"] and h[2]["to"] == v1 and "health check failed" in h[2]["reason"]


# ---------------------------------------------------------------- bad input, bad state

def test_an_unwritable_results_directory_is_refused_before_the_device_is_touched(cli, lab, versions, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code, _, err = _deploy(cli, versions["v1"], lab.inventory(), "--results", blocker / "results")
    assert code == 2 and "--results" in err and "a-file, which is not a directory" in err, err
    assert not lab.workdir.exists() and blocker.read_text() == "not a directory"


@pytest.mark.parametrize("name", ["a/b", "..", "../x", "x;rm -rf ~", "a b", "$(id)", ".hidden", "-x"])
def test_bad_release_names_are_refused(cli, lab, versions, name):
    inv = lab.inventory()
    code, _, err = _deploy(cli, versions["v1"], inv, f"--as={name}")
    assert code == 2 and "is not allowed" in err and "--as NAME" in err, err
    code, _, err = cli("rollback", "--device", "local", "--inventory", inv, "--", name)
    assert code == 2 and "it was deployed as" in err and "pass --as" not in err, err
    assert cli("releases", "--device", "local", "--inventory", inv, "--", name)[0] == 2
    assert cli("rollback", NAME, "--device", "local", "--inventory", inv, f"--to={name}")[0] == 2
    assert not lab.workdir.exists()


def test_only_a_release_whose_digest_checks_out_becomes_current(cli, lab, versions):
    inv = lab.inventory()
    for v in ("v1", "v2"):
        assert _deploy(cli, versions[v], inv)[0] == 0
    v1, v2 = releases_on_disk(lab.workdir)
    # an incomplete release (no release.json: its upload never finished)
    half = top(lab.workdir) / "releases" / "20000101T000000Z-0123456789ab"
    half.mkdir()
    (half / "model.onnx").write_bytes(b"partial")
    code, _, err = cli("rollback", NAME, "--device", "local", "--inventory", inv, "--to", half.name)
    assert code == 4 and "incomplete" in err, err
    # a sealed release whose artifact changed on the device
    (top(lab.workdir) / "releases" / v1 / "model.onnx").write_bytes(b"tampered")
    code, _, err = cli("rollback", NAME, "--device", "local", "--inventory", inv, "--to", v1)
    assert code == 4 and "sha256 mismatch" in err, err
    assert current_id(lab.workdir) == v2
    assert [x["to"] for x in history(lab.workdir)] == [v1, v2]


@pytest.mark.slow
def test_current_pointing_at_a_missing_release_is_reported(cli, lab, versions):
    inv = lab.inventory()
    assert _deploy(cli, versions["v1"], inv)[0] == 0
    cur = top(lab.workdir) / "current"
    tmp = top(lab.workdir) / "tmp-link"
    os.symlink("releases/20000101T000000Z-0123456789ab", tmp)
    os.replace(tmp, cur)
    code, out, err = cli("releases", NAME, "--device", "local", "--inventory", inv)
    assert code == 4 and "points at release 20000101T000000Z-0123456789ab, which is missing" in err, err
    assert os.readlink(cur) == "releases/20000101T000000Z-0123456789ab"      # not repaired
    code, out, err = _deploy(cli, versions["v2"], inv, "--json")
    assert code == 0, err
    assert "which is missing" in json.loads(out)["devices"][0]["notes"][0]
    assert history(lab.workdir)[-1]["from_missing"] is True


@pytest.mark.slow
def test_pruning_keeps_newest_and_never_current_or_the_one_before(cli, lab, versions):
    inv = lab.inventory()
    for v in ("v1", "v2", "v4"):
        assert _deploy(cli, versions[v], inv, "--keep", "2")[0] == 0
    kept = releases_on_disk(lab.workdir)
    assert len(kept) == 2 and kept[-1] == current_id(lab.workdir)
    assert cli("rollback", NAME, "--device", "local", "--inventory", inv, "-q")[0] == 0
    older = current_id(lab.workdir)
    assert older == kept[0]
    # current is now the older of the two; keep 1 still keeps it (it is the one before the new one)
    assert _deploy(cli, versions["v1"], inv, "--keep", "1")[0] == 0
    after = releases_on_disk(lab.workdir)
    assert older in after and current_id(lab.workdir) in after and len(after) == 2


def test_a_held_lease_makes_deploy_report_busy(cli, lab, versions):
    """One deploy or bench per device: a lease another run holds makes the deploy busy (exit 4)."""
    from edgeforge.device.link.inventory import load_inventory
    from edgeforge.device.link.lease import Lease
    from edgeforge.device.link.transport import SSHTransport

    inv = lab.inventory()
    with SSHTransport(load_inventory(inv).get("local")) as tr:
        lease = Lease(tr, 600, what="edgeforge bench (another run)").acquire()
        try:
            code, _, err = _deploy(cli, versions["v1"], inv)
        finally:
            lease.release()
    assert code == 4 and "busy: leased by" in err, err
    assert current_id(lab.workdir) is None and not releases_on_disk(lab.workdir)


@pytest.mark.needs_lite
def test_deploy_a_paddle_lite_build(cli, lab, builds):
    """The smoke test runs a release with its own runtime: Paddle Lite for a .nb build."""
    inv = lab.inventory()
    code, out, err = cli("releases", "digits-lite", "--device", "local", "--inventory", inv, "--json")
    assert code == 0 and json.loads(out)["releases"] == [] and not (lab.workdir / "deploy").exists()
    code, out, err = _deploy(cli, builds.lite, inv, "--as", "digits-lite", "--json")
    assert code == 0, err
    [e] = json.loads(out)["devices"]
    assert e["status"] == "deployed" and e["health"]["passed"]
    assert e["smoke"]["budget"] == {"max_rel_error": 1e-4} and e["smoke"]["runtime"]["name"] == "paddlelite"
    link = lab.workdir / "deploy" / "digits-lite" / "current"
    assert os.readlink(link) == f"releases/{e['release']}" and (link / "model.nb").is_file()


# ---------------------------------------------------------------- model identity, clean-up

def _renamed(src: Path, dst: Path, model: str) -> Path:
    """A copy of the build ``src`` (another artifact) whose manifest names another model."""
    make_variant(src, dst, _doc(f"{model} build"))
    m = json.loads((dst / "manifest.json").read_text())
    m["name"] = model
    (dst / "manifest.json").write_text(json.dumps(m, indent=2))
    return dst


@pytest.mark.slow
def test_another_model_under_a_name_needs_replace_model(cli, lab, versions, tmp_path):
    inv = lab.inventory()
    assert _deploy(cli, versions["v1"], inv)[0] == 0
    v1, before = current_id(lab.workdir), history(lab.workdir)
    other = _renamed(versions["v1"], tmp_path / "other", "faces")
    code, _, err = _deploy(cli, other, inv, "--as", NAME)
    assert code == 2, err
    [line] = err.strip().splitlines()
    assert "holds model 'digits'" in line and "model 'faces'" in line and "--replace-model" in line, err
    assert current_id(lab.workdir) == v1 and history(lab.workdir) == before
    assert releases_on_disk(lab.workdir) == [v1]
    # the same model, a new build: as before
    assert _deploy(cli, versions["v2"], inv)[0] == 0
    code, out, err = _deploy(cli, other, inv, "--as", NAME, "--replace-model", "--json")
    assert code == 0, err
    [e] = json.loads(out)["devices"]
    assert e["status"] == "deployed" and "replaces model digits" in e["notes"]
    assert current_digest(lab.workdir) == digest(other)
    code, st, _ = _releases_json(cli, inv)
    assert st["releases"][-1]["model"] == "faces" and st["releases"][0]["model"] == "digits"


@pytest.mark.slow
def test_a_failed_smoke_run_leaves_no_release_behind(cli, lab, versions):
    """The runner crashes on the new release (as a bad input name did: a KeyError on the
    device): exit 4, current unchanged, and the release directory is gone."""
    hook = lab.root / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys\n"
        "if len(sys.argv) > 2 and sys.argv[1] == 'smoke' and '/releases/' in sys.argv[2]:\n"
        "    sys.stderr.write(\"KeyError: 'x'\\n\"); sys.exit(1)\n")
    py = lab.script("python-crash", f'#!/bin/sh\nPYTHONPATH={hook} exec {lab.sshd.python} "$@"\n')
    assert _deploy(cli, versions["v1"], lab.inventory())[0] == 0
    v1 = current_id(lab.workdir)
    code, out, err = _deploy(cli, versions["v2"], lab.inventory(python=str(py)), "--json")
    assert code == 4, err
    [e] = json.loads(out)["devices"]
    assert e["status"] == "failed" and e["verified"] and e["current"] == v1
    assert current_id(lab.workdir) == v1 and releases_on_disk(lab.workdir) == [v1]


@pytest.mark.slow
def test_the_next_deploy_sweeps_incomplete_releases_but_never_current_or_sealed(cli, lab, versions):
    inv = lab.inventory()
    for v in ("v1", "v2"):
        assert _deploy(cli, versions[v], inv)[0] == 0
    v1, v2 = releases_on_disk(lab.workdir)
    half = top(lab.workdir) / "releases" / "20000101T000000Z-0123456789ab"
    half.mkdir()
    (half / "model.onnx").write_bytes(b"partial")
    code, out, err = _deploy(cli, versions["v4"], inv, "--json", "--keep", "5")
    assert code == 0, err
    [e] = json.loads(out)["devices"]
    assert any("swept 1 incomplete" in n for n in e["notes"]), e
    assert releases_on_disk(lab.workdir) == [v1, v2, e["release"]]

