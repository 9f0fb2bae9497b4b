"""edgeforge bench against a real sshd on loopback: full results, upload by digest, drift."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from edgeforge.device.link.runner_app import runner_app
from edgeforge.results.schema import SCHEMA
from result_factory import read_result_doc

pytestmark = pytest.mark.device

DRIFT_KEYS = ("top1_agreement", "accuracy", "float_accuracy", "accuracy_drop", "max_abs_error",
              "mean_abs_error", "cosine")


def _sha(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _bench(cli, lab, build, *extra, inventory=None):
    inv = inventory or lab.inventory()
    return cli("bench", build, "--device", "local", "--inventory", inv, "--results", lab.results,
               "--runs", "20", "--warmups", "auto", *extra)


def test_full_bench_onnx_int8(cli, lab, builds):
    code, out, err = _bench(cli, lab, builds.onnx)
    assert code == 0, err
    [path] = lab.result_files()
    r = read_result_doc(path)                       # validates edgeforge.bench/1
    m = builds.onnx_manifest
    assert r["schema"] == SCHEMA and r["status"] == "ok"
    assert r["artifact"] == {**r["artifact"], "sha256": m["artifact"]["sha256"], "target": "linux-x86",
                             "backend": "onnx", "precision": "int8"}
    fp = r["device"]["fingerprint"]
    assert r["device"]["name"] == "local"
    for k in ("cpu_model", "kernel", "governor", "temp_c_before", "temp_c_after", "load_avg", "cores",
              "mem_total_mb"):
        assert k in fp
    assert fp["cpu_model"] and fp["kernel"] and len(fp["load_avg"]) == 3
    assert r["runtime"]["name"] == "onnxruntime" and r["runtime"]["version"]
    s = r["settings"]
    assert s["runs"] == 20 and s["threads"] == 2 and s["warmups"] >= 10 and s["warmups_requested"] == "auto"
    assert s["execution_providers"] == ["CPUExecutionProvider"]
    assert len(r["samples_ms"]) == 20 and all(x > 0 for x in r["samples_ms"])
    sm = r["summary"]
    assert 0 < sm["p50_ms"] <= sm["p90_ms"] <= sm["p99_ms"]
    assert sm["mad_ms"] >= 0 and sm["mean_ms"] > 0 and sm["peak_rss_mb"] > 10
    t = r["transfer"]
    ref = m["reference"]
    sizes = sum((builds.onnx / rel).stat().st_size for rel in ("model.onnx", ref["inputs"], ref["outputs"]))
    assert t["uploaded_bytes"] > sizes and t["seconds"] >= 0     # + the runner itself
    # the runner went as one zipapp named by its digest, and the result records that digest
    app = runner_app()
    assert r["runner_sha256"] == app.sha256 and app.name in t["files"]
    assert (lab.workdir / m["artifact"]["sha256"] / app.name).read_bytes() == app.path.read_bytes()
    # the reference data ships compressed, sized to the drift's job (all 540 digits fit)
    assert ref["inputs"] == "reference/device_inputs.npz" and ref["samples"] == ref["evaluation_samples"] == 540
    assert ref["bytes"] < ref["raw_bytes"] and "95 % Wilson" in ref["confidence"]
    # the table
    assert "p50" in out and "top-1 agreement" in out and str(path.name)[:20] in out.replace("\n", "")


def test_on_device_drift_equals_host_verify(cli, lab, builds):
    """The ONNX artifact's drift measured over SSH equals figures computed here, with numpy, from
    the raw arrays (an oracle that shares no code with the runner or verify), and the host verify
    figures within 1e-6."""
    code, _, err = _bench(cli, lab, builds.onnx, "--runs", "3")
    assert code == 0, err
    r = read_result_doc(lab.result_files()[0])
    m = builds.onnx_manifest
    oracle = _oracle_drift(builds.onnx, m)
    assert oracle["accuracy"] > 0.9 and 0.99 < oracle["cosine"] < 1.0 and oracle["max_abs_error"] > 0
    for k in DRIFT_KEYS:
        assert r["drift"][k] == pytest.approx(oracle[k], abs=1e-5), k
    assert r["drift"]["samples"] == m["reference"]["samples"] == 540
    if m["verify"]["arithmetic"].get("host_kernels") != "unsound":
        # (where they are unsound, verify judged by exact QDQ, onnxruntime#26324, while the
        # loopback device runs those kernels: only the oracle above applies)
        for k in DRIFT_KEYS:
            assert r["drift"][k] == pytest.approx(m["verify"][k], abs=1e-6), k


def _oracle_drift(build, manifest) -> dict:
    """Drift written out from its definitions: the reference inputs through onnxruntime's CPU
    provider (the loopback device's runtime), 64 samples a run, against the float reference's
    output 0 and the labels. cosine is the mean over samples of each sample's cosine similarity;
    accuracy_drop is in percentage points."""
    import onnxruntime as ort

    with np.load(build / manifest["reference"]["inputs"]) as z:
        feeds = {k: z[k] for k in z.files}
    labels = feeds.pop("labels")
    with np.load(build / manifest["reference"]["outputs"]) as z:
        ref = z["output_0"].astype(np.float64)
    sess = ort.InferenceSession(str(build / "model.onnx"), providers=["CPUExecutionProvider"])
    out = np.concatenate([sess.run(None, {k: v[i:i + 64] for k, v in feeds.items()})[0]
                          for i in range(0, len(labels), 64)]).astype(np.float64)
    assert out.shape == ref.shape == (len(labels), 10)
    diff = np.abs(out - ref)
    cosines = [float(o @ f) / (np.linalg.norm(o) * np.linalg.norm(f)) for o, f in zip(out, ref)]
    hit, float_hit = out.argmax(1) == labels, ref.argmax(1) == labels
    return {"top1_agreement": np.mean(out.argmax(1) == ref.argmax(1)), "accuracy": np.mean(hit),
            "float_accuracy": np.mean(float_hit), "accuracy_drop": (np.mean(float_hit) - np.mean(hit)) * 100,
            "max_abs_error": diff.max(), "mean_abs_error": diff.mean(), "cosine": np.mean(cosines)}


def test_rebench_uploads_nothing_and_keeps_both_results(cli, lab, builds):
    inv = lab.inventory()
    assert _bench(cli, lab, builds.onnx, "--runs", "3", inventory=inv)[0] == 0
    first = lab.result_files()
    before = first[0].read_bytes()
    code, out, err = _bench(cli, lab, builds.onnx, "--runs", "3", inventory=inv)
    assert code == 0, err
    files = lab.result_files()
    assert len(files) == 2 and first[0].read_bytes() == before        # never overwritten
    second = read_result_doc(next(f for f in files if f != first[0]))
    assert second["transfer"]["uploaded_bytes"] == 0 and second["transfer"]["files"] == []
    assert "already held every file" in out


def test_tampered_files_on_device_are_detected_and_uploaded_again(cli, lab, builds):
    inv = lab.inventory()
    assert _bench(cli, lab, builds.onnx, "--runs", "3", inventory=inv)[0] == 0
    remote = lab.workdir / builds.onnx_manifest["artifact"]["sha256"]
    model = remote / "model.onnx"
    model.write_bytes(model.read_bytes()[:-10] + b"tampered!!")          # same size, other bytes
    ref = remote / "reference" / "device_outputs.npz"
    ref.write_bytes(ref.read_bytes()[:100])                              # truncated
    code, _, err = _bench(cli, lab, builds.onnx, "--runs", "3", inventory=inv)
    assert code == 0, err
    r = read_result_doc(max(lab.result_files(), key=lambda p: p.stat().st_mtime_ns))
    assert sorted(r["transfer"]["files"]) == ["model.onnx", "reference/device_outputs.npz"]
    assert r["transfer"]["uploaded_bytes"] == (builds.onnx / "model.onnx").stat().st_size + \
        (builds.onnx / "reference/device_outputs.npz").stat().st_size
    assert _sha(model) == builds.onnx_manifest["artifact"]["sha256"]
    assert _sha(ref) == _sha(builds.onnx / "reference" / "device_outputs.npz")
    assert not list(remote.rglob(".*.part-*"))                          # no temporary files left


@pytest.mark.needs_lite
def test_lite_fp32_bench(cli, lab, builds):
    code, out, err = _bench(cli, lab, builds.lite, "--warmups", "3")
    assert code == 0, err
    r = read_result_doc(lab.result_files()[0])
    assert r["runtime"]["name"] == "paddlelite" and r["artifact"]["backend"] == "lite"
    assert r["settings"]["warmups"] == 3 and r["settings"]["warmup_stable"] is None
    assert len(r["samples_ms"]) == 20
    v = builds.lite_manifest["verify"]
    assert r["drift"]["top1_agreement"] == 1.0
    assert r["drift"]["accuracy"] == pytest.approx(v["accuracy"], abs=1e-6)
    assert r["drift"]["max_abs_error"] < 1e-4


@pytest.mark.needs_lite
def test_bench_with_benchmark_bin(cli, lab, builds):
    """A device entry naming benchmark_bin times with it (one warm run per process). The binary
    here is a stand-in that prints benchmark_bin's Perf Info block; the flags it gets are checked."""
    from lite_profile_text import perf_info

    log = lab.root / "bb-args.txt"
    stub = lab.script("benchmark_bin", f"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "benchmark_bin version: v2.13-stub"; exit 0; fi
echo "$@" >> {log}
cat <<EOF
{perf_info(1.25)}EOF
""")
    inv = lab.inventory(benchmark_bin=str(stub))
    code, out, err = _bench(cli, lab, builds.lite, "--runs", "4", inventory=inv)
    assert code == 0, err
    r = read_result_doc(lab.result_files()[0])
    assert r["settings"]["runner"] == "benchmark_bin"
    assert r["runtime"] == {**r["runtime"], "name": "paddlelite-benchmark_bin", "version": "v2.13-stub"}
    assert r["samples_ms"] == [1.25] * 4
    calls = log.read_text().splitlines()
    assert len(calls) == 4
    assert "--repeats=1" in calls[0] and "--input_shape=1,1,32,32" in calls[0] and "model.nb" in calls[0]
    assert r["drift"]["top1_agreement"] == 1.0            # drift still measured with the Python API


def test_bench_json_output(cli, lab, builds):
    code, out, err = _bench(cli, lab, builds.onnx, "--runs", "2", "--warmups", "0", "--json", "-q")
    assert code == 0, err
    r = json.loads(out)
    assert r["schema"] == SCHEMA and r["settings"]["warmups"] == 0 and len(r["samples_ms"]) == 2


def test_run_builds_then_benches(cli, lab, builds, tmp_path):
    code, out, err = cli("run", builds.project, "--target", "linux-x86", "--device", "local",
                         "--inventory", lab.inventory(), "--results", lab.results, "--out", tmp_path / "b",
                         "--runs", "3", "--warmups", "1", "-q")
    assert code == 0, err
    r = read_result_doc(lab.result_files()[0])
    assert r["artifact"]["sha256"] == builds.onnx_manifest["artifact"]["sha256"]   # same inputs, same artifact
    assert (tmp_path / "b" / "manifest.json").is_file()


def test_run_refuses_a_device_of_another_target(cli, lab, builds):
    inv = lab.inventory(target="rpi4")
    code, _, err = cli("run", builds.project, "--target", "linux-x86", "--device", "local", "--inventory", inv)
    assert code == 2 and "rpi4" in err


def test_bench_refuses_a_build_for_another_target(cli, lab, builds):
    code, _, err = _bench(cli, lab, builds.onnx, inventory=lab.inventory(target="rpi4"))
    assert code == 2 and "rpi4" in err and "linux-x86" in err


def test_results_directory_keeps_every_file_of_the_users(cli, lab, builds, tmp_path):
    """`bench --results DIR` follows build --out's rule: it replaces nothing edgeforge did not
    write. The user's files there, a symlink, and files holding the very name the result would
    take (one for every second of the next 15 minutes) are left as they were: the result takes
    the next free name. `--results FILE` (a file of the user's) is exit 2, the file unchanged."""
    import datetime as dt
    import json

    m = json.loads((builds.onnx / "manifest.json").read_text())
    a = m["artifact"]
    lab.results.mkdir(parents=True)
    outside = tmp_path / "outside.json"
    outside.write_text('{"mine": true}\n')
    (lab.results / "notes.json").write_text('{"notes": 1}\n')
    (lab.results / "link.json").symlink_to(outside)
    now = dt.datetime.now(dt.timezone.utc)
    taken = []
    for s in range(900):
        ts = (now + dt.timedelta(seconds=s)).strftime("%Y%m%dT%H%M%SZ")
        p = lab.results / f"{ts}-local-{m['name']}-{m['target']}-{m['backend']}-{m['precision']}-{a['sha256'][:8]}.json"
        p.write_text(f'{{"second": {s}}}\n')
        taken.append(p)
    before = {p.name: p.read_bytes() for p in lab.results.iterdir()}
    code, out, err = _bench(cli, lab, builds.onnx, "--runs", "3", "--warmups", "0")
    assert code == 0, err
    after = {p.name: p.read_bytes() for p in lab.results.iterdir()}
    assert {k: after[k] for k in before} == before and outside.read_text() == '{"mine": true}\n'
    [new] = sorted(set(after) - set(before))
    assert new.endswith("-2.json") and new[:-len("-2.json")] + ".json" in before, new
    assert read_result_doc(lab.results / new)["status"] == "ok"
    thesis = tmp_path / "thesis.pdf"
    thesis.write_bytes(b"%PDF-1.7 precious")
    code, _, err = cli("bench", builds.onnx, "--device", "local", "--inventory", lab.inventory(),
                       "--results", thesis, "--runs", "3")
    assert code == 2 and str(thesis) in err and "Traceback" not in err, err
    assert thesis.read_bytes() == b"%PDF-1.7 precious"
