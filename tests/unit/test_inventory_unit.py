"""devices.toml: lookup order, validation, paths; remote command quoting; partial results."""
from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from edgeforge.device.link.inventory import find_inventory, load_inventory
from edgeforge.device.link.transport import quote_command
from edgeforge.errors import ConfigError

ENTRY = """
[devices.pi-lab-3]
host = "pi-lab-3.local"
port = 22
user = "pi"
identity = "keys/id_ed25519"
known_hosts = "~/.ssh/known_hosts"
target = "rpi4"
python = "python3"
workdir = "/home/pi/edgeforge"
tags = ["lab", "arm"]
"""


def test_load_inventory(tmp_path):
    p = tmp_path / "devices.toml"
    p.write_text(ENTRY)
    inv = load_inventory(p)
    d = inv.get("pi-lab-3")
    assert d.host == "pi-lab-3.local" and d.port == 22 and d.user == "pi" and d.target == "rpi4"
    assert d.identity == str(tmp_path / "keys" / "id_ed25519")          # relative to the inventory
    assert d.known_hosts.endswith("/.ssh/known_hosts") and not d.known_hosts.startswith("~")
    assert d.tags == ["lab", "arm"] and d.address == "pi@pi-lab-3.local:22"


def test_lookup_order(tmp_path, monkeypatch):
    for name in ("explicit", "env", "cwd"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "devices.toml").write_text(ENTRY.replace("pi-lab-3", name))
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.delenv("EDGEFORGE_DEVICES", raising=False)
    assert load_inventory().names() == ["cwd"]
    monkeypatch.setenv("EDGEFORGE_DEVICES", str(tmp_path / "env" / "devices.toml"))
    assert load_inventory().names() == ["env"]
    assert load_inventory(tmp_path / "explicit" / "devices.toml").names() == ["explicit"]


def test_no_inventory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EDGEFORGE_DEVICES", raising=False)
    with pytest.raises(ConfigError, match="no device inventory"):
        find_inventory()
    with pytest.raises(ConfigError, match="not found"):
        find_inventory(tmp_path / "missing.toml")


@pytest.mark.parametrize("bad, match", [
    (ENTRY.replace('tags =', 'tagz ='), "unknown key .*tagz.*did you mean 'tags'"),
    (ENTRY.replace('workdir = "/home/pi/edgeforge"', 'workdir = "edgeforge"'), "workdir"),
    (ENTRY.replace('host = "pi-lab-3.local"\n', ''), "missing required key 'host'"),
    (ENTRY.replace('port = 22', 'port = 0'), "port"),
])
def test_bad_entries(tmp_path, bad, match):
    p = tmp_path / "devices.toml"
    p.write_text(bad)
    with pytest.raises(ConfigError, match=match):
        load_inventory(p)


def test_unknown_device_suggests(tmp_path):
    p = tmp_path / "devices.toml"
    p.write_text(ENTRY)
    with pytest.raises(ConfigError, match="did you mean 'pi-lab-3'"):
        load_inventory(p).get("pi-lab3")


@pytest.mark.parametrize("arg", ["plain", "with space", "it's", "$(touch /tmp/pwned)", "a;b|c&&d", "`x`", '"q"',
                                 "{\"json\": [1, 2]}", "new\nline", ""])
def test_quote_command_round_trips(arg, tmp_path):
    cmd = quote_command(["printf", "%s", arg], cwd=str(tmp_path / "dir with 'quote'"))
    (tmp_path / "dir with 'quote'").mkdir()
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == arg
    assert shlex.split(cmd)[:2] == ["sh", "-c"]


def test_quote_command_reports_signals():
    out = subprocess.run(["sh", "-c", quote_command(["sh", "-c", "kill -SEGV $$"])], capture_output=True)
    assert out.returncode == 139


def test_partial_result_is_valid(tmp_path):
    """What a runner reported before a failure becomes an 'incomplete' result."""
    from edgeforge.device.measure.bench import Bench, resolve_settings
    from edgeforge.options import BenchOptions
    from edgeforge.device.link.inventory import Device
    from edgeforge.errors import DeviceError
    from edgeforge.results.schema import read_result

    manifest = {"schema": "edgeforge.build/1", "name": "m", "target": "linux-x86", "backend": "onnx",
                "precision": "int8", "artifact": {"path": "model.onnx", "sha256": "ab" * 32, "size_bytes": 1},
                "inputs": [{"name": "x", "shape": [-1, 4], "dtype": "float32"}],
                "reference": {"inputs": "reference/eval_inputs.npz", "outputs": "reference/float_outputs.npz"},
                "runtime": {"threads": 2, "power_mode": None, "execution_providers": ["CPUExecutionProvider"]},
                "target_profile": {"arch": "x86_64", "bench": {"warmups": "auto", "runs": 5}}, "verify": {}}
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "manifest.json").write_text(json.dumps(manifest))
    dev = Device(name="d", host="h", target="linux-x86", workdir="/w")
    b = Bench(tmp_path / "build", dev, resolve_settings(manifest, dev), BenchOptions(results_dir=tmp_path / "results"))
    for ev in [{"event": "start", "pid": 1}, {"event": "fingerprint", "when": "before", "fingerprint": {"temp_c": 40.0}},
               {"event": "latency", "warmups": 2, "samples_ms": [1.0, 2.0, 3.0], "peak_rss_mb": 50.0,
                "runtime": {"name": "onnxruntime", "version": "1.23"}}]:
        b.partial.feed("@@edgeforge " + json.dumps(ev))
    err = b.save_partial(DeviceError("d", "connection to h lost during the drift pass"))
    assert err.one_line().startswith("device d: connection to h lost") and "what was measured is in" in err.one_line()
    [path] = (tmp_path / "results").glob("*.json")
    r = read_result(path)
    assert r.status == "incomplete" and r.samples_ms == [1.0, 2.0, 3.0] and r.summary.p50_ms == 2.0
    assert r.device.fingerprint.temp_c_before == 40.0 and r.drift.cosine is None
    assert "lost" in r.error and path.name.endswith("-incomplete.json")
    # nothing measured yet: nothing written, the error unchanged
    b2 = Bench(tmp_path / "build", dev, resolve_settings(manifest, dev), BenchOptions(results_dir=tmp_path / "r2"))
    e = DeviceError("d", "x")
    assert b2.save_partial(e) is e and not (tmp_path / "r2").exists()
