"""issue 23: random manifests in a build directory, thrown at the one check of a build
(``edgeforge.device.link.buildcheck.validate_build``) and at ``edgeforge bench`` (the CLI,
in-process): never an internal error (exit 70), never a traceback; a manifest that is refused is
refused before connecting (exit 2) and leaves the device's health state untouched. The device
is a closed loopback port: a manifest that passes meets "connection refused" (exit 4)."""
from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import socket

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from edgeforge.cli.main import main
from edgeforge.device.link.buildcheck import validate_build
from edgeforge.errors import BuildInvalid

MODEL = b"not really an onnx model, never loaded: the device port is closed"
BASE = {
    "schema": "edgeforge.build/1", "name": "digits", "target": "linux-x86", "backend": "onnx",
    "precision": "int8",
    "artifact": {"path": "model.onnx", "sha256": hashlib.sha256(MODEL).hexdigest(), "size_bytes": len(MODEL)},
    "inputs": [{"name": "x", "shape": [-1, 1, 8, 8], "dtype": "float32"}],
    "reference": {"inputs": "reference/eval_inputs.npz", "outputs": "reference/float_outputs.npz", "samples": 4},
    "runtime": {"threads": 2, "power_mode": None, "execution_providers": ["CPUExecutionProvider"],
                "provider_options": {}},
    "target_profile": {"arch": "x86_64", "soc": "generic x86-64",
                       "bench": {"warmups": "auto", "runs": 200, "connect_timeout_s": 10.0,
                                 "command_timeout_s": 300.0, "runner": "python"}},
}
FIELDS = [("inputs", 0, "name"), ("inputs", 0, "dtype"), ("inputs", 0, "shape"), ("inputs",),
          ("artifact", "path"), ("artifact", "sha256"), ("reference", "inputs"), ("reference", "outputs"),
          ("runtime", "threads"), ("runtime", "execution_providers"), ("runtime",), ("name",),
          ("backend",), ("precision",), ("target_profile",)]
HOSTILE = ["x'; touch /tmp/pwned", "$(reboot)", "x y", "../x", "/etc/passwd", "labels", "", "a" * 200,
           "save_infer_model/scale_0.tmp_0", "image", "x\n", "model.onnx", "reference/../manifest.json",
           "\u00e9", ".hidden", "-rf"]
scalars = st.one_of(st.booleans(), st.none(), st.integers(-2**40, 2**40), st.floats(),
                    st.sampled_from(HOSTILE), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["name", "shape", "dtype", "x"]), inner,
                                                  max_size=3)), max_leaves=8)
manifests = st.builds(lambda path, value: _mutate(path, value), st.sampled_from(FIELDS), values)


def _mutate(path, value) -> dict:
    m = copy.deepcopy(BASE)
    node = m
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return m


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    b = tmp_path_factory.mktemp("fuzz") / "build"
    (b / "reference").mkdir(parents=True)
    (b / "model.onnx").write_bytes(MODEL)
    rng = np.random.default_rng(0)
    np.savez(b / "reference" / "eval_inputs.npz", x=rng.standard_normal((4, 1, 8, 8)).astype("float32"),
             labels=np.arange(4))
    np.savez(b / "reference" / "float_outputs.npz", output_0=rng.standard_normal((4, 10)).astype("float32"))
    (b / "manifest.json").write_text(json.dumps(BASE))
    validate_build(b, BASE)          # the base is a valid build
    return b


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(manifest=manifests)
def test_validate_build_raises_only_build_invalid(build_dir, manifest):
    try:
        validate_build(build_dir, manifest)
    except BuildInvalid as exc:
        assert "\n" not in str(exc)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(manifest=manifests)
@example(manifest=BASE)                 # valid: the closed port answers
@example(manifest=_mutate(("inputs", 0, "name"), "x'; touch /tmp/pwned"))
def test_bench_of_a_random_manifest_never_blames_the_device(build_dir, tmp_path_factory, manifest):
    root = tmp_path_factory.mktemp("bench")
    inv, state = root / "devices.toml", root / "devices.state.json"
    inv.write_text(f'[devices.d]\nhost = "127.0.0.1"\nport = {_closed_port()}\ntarget = "linux-x86"\n'
                   f'workdir = "{root / "workdir"}"\n')
    (build_dir / "manifest.json").write_text(json.dumps(manifest))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["bench", str(build_dir), "--device", "d", "--inventory", str(inv), "--results",
                     str(root / "results"), "--retries", "0", "--connect-timeout", "5", "-q"])
    text = out.getvalue() + err.getvalue()
    assert code in (2, 4), text
    assert "Traceback" not in text and len([ln for ln in text.splitlines() if ln.startswith("error:")]) == 1
    if code == 2:                       # refused: before any connection, the device not blamed
        assert not state.exists(), text
        assert "connection refused" not in text
    else:                               # a valid manifest: it got as far as the closed port
        assert "connection refused" in text, text
    assert not (root / "results").exists() or not list((root / "results").iterdir())


def test_the_writer_and_the_reader_share_one_model():
    """issue 24: build_manifest validates what it writes through the model buildcheck reads
    with, so there is one schema of the manifest, not two."""
    import inspect

    from edgeforge import manifest
    from edgeforge.device.link import buildcheck
    assert buildcheck.Manifest is manifest.Manifest
    assert "Manifest.model_validate" in inspect.getsource(manifest.build_manifest)
    assert not [n for n, v in vars(buildcheck).items()
                if isinstance(v, type) and issubclass(v, manifest.BaseModel) and v.__module__ == buildcheck.__name__]
