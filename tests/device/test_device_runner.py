"""The on-device runner run directly (no SSH): it refuses files whose sha256 differs before it
loads anything, keeps its legacy command line, and probes the runtimes."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from edgeforge.device.provision.localsshd import device_python
from edgeforge.device.link.runner_app import runner_app
from edgeforge.runner.protocol import EVENT_PREFIX, EXIT_DIGEST, sha256_file

pytestmark = pytest.mark.device


def _spec(build, manifest, **over):
    files = {rel: sha256_file(build / rel) for rel in
             (manifest["artifact"]["path"], manifest["reference"]["inputs"], manifest["reference"]["outputs"])}
    spec = {"files": files, "artifact": manifest["artifact"], "backend": manifest["backend"],
            "inputs": manifest["inputs"], "reference": manifest["reference"], "runtime": manifest["runtime"],
            "warmups": 1, "runs": 3, "deadline_s": 120}
    spec.update(over)
    return spec


def _events(stdout):
    return [json.loads(ln[len(EVENT_PREFIX):]) for ln in stdout.splitlines()
            if ln.startswith(EVENT_PREFIX)]


def _run(*args):
    return subprocess.run([device_python(), str(runner_app().path), *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def test_runner_refuses_a_tampered_artifact(builds, tmp_path):
    build = tmp_path / "b"
    shutil.copytree(builds.onnx, build)
    spec = _spec(build, builds.onnx_manifest)
    (build / "model.onnx").write_bytes(b"not a model")
    p = _run("bench", build, "--spec", json.dumps(spec))
    assert p.returncode == EXIT_DIGEST
    evs = _events(p.stdout)
    assert [e["event"] for e in evs] == ["start", "error"]          # nothing loaded, nothing timed
    assert evs[-1]["kind"] == "digest" and evs[-1]["files"] == ["model.onnx"]


def test_runner_bench_events(builds):
    p = _run("bench", builds.onnx, "--spec", json.dumps(_spec(builds.onnx, builds.onnx_manifest)))
    assert p.returncode == 0, p.stderr
    names = [e["event"] for e in _events(p.stdout)]
    assert names == ["start", "files", "fingerprint", "runtime", "latency", "fingerprint", "drift", "done"]


def test_runner_legacy_command_line(builds):
    p = _run(builds.onnx)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["drift"]["accuracy"] == pytest.approx(builds.onnx_manifest["verify"]["accuracy"], abs=1e-9)


def test_runner_probe(tmp_path):
    p = _run("probe", "--workdir", tmp_path / "new" / "wd", "--benchmark-bin", "/nonexistent/benchmark_bin")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["runtimes"]["onnxruntime"]["present"] and out["runtimes"]["paddlelite"]["present"]
    assert out["runtimes"]["benchmark_bin"]["present"] is False
    assert out["workdir"] == {"path": str(tmp_path / "new" / "wd"), "exists": False, "writable": True}
