"""edgeforge devices [list] and devices check NAME, against a real sshd."""
from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.device


def test_devices_list(cli, lab):
    inv = lab.inventory()
    code, out, err = cli("devices", "--inventory", inv)
    assert code == 0, err
    assert "local" in out and "linux-x86" in out
    code, out, err = cli("devices", "list", "--inventory", inv, "--json")
    assert code == 0
    d = json.loads(out)["local"]
    assert d["host"] == "127.0.0.1" and d["port"] == lab.sshd.port and d["target"] == "linux-x86"


def test_devices_list_from_env(cli, lab, monkeypatch):
    monkeypatch.setenv("EDGEFORGE_DEVICES", str(lab.inventory(name="envdev")))
    code, out, _ = cli("devices", "list", "--json")
    assert code == 0 and list(json.loads(out)) == ["envdev"]


def test_devices_check(cli, lab):
    code, out, err = cli("devices", "check", "local", "--inventory", lab.inventory(), "--json", "-q")
    assert code == 0, err
    r = json.loads(out)
    assert r["matches"] is True
    assert r["fingerprint"]["cpu_model"] and r["fingerprint"]["kernel"] and r["fingerprint"]["arch"] == "x86_64"
    assert r["runtimes"]["onnxruntime"]["present"] and r["runtimes"]["onnxruntime"]["version"]
    assert r["runtimes"]["paddlelite"]["present"]
    checks = {c["check"]: c for c in r["checks"]}
    assert checks["architecture"]["ok"] and checks["runtime for onnx"]["ok"] and checks["runtime for onnx"]["required"]
    assert not lab.workdir.exists()                      # check writes nothing on the device
    code, out, err = cli("devices", "check", "local", "--inventory", lab.inventory())
    assert code == 0 and "onnxruntime" in out and "architecture" in out


def test_devices_check_arch_mismatch(cli, lab):
    """A device declared as an rpi4 that is really x86-64 does not match its target."""
    code, out, err = cli("devices", "check", "local", "--inventory", lab.inventory(target="rpi4"), "-q")
    assert code == 4
    [line] = err.strip().splitlines()
    assert line.startswith("error: device local: does not match target rpi4") and "architecture" in line


def test_unknown_device_name(cli, lab):
    code, _, err = cli("devices", "check", "locl", "--inventory", lab.inventory())
    assert code == 2 and "did you mean 'local'" in err


def test_unreachable_device_check(cli, lab):
    from edgeforge.device.provision.localsshd import free_port

    code, _, err = cli("devices", "check", "local", "--inventory", lab.inventory(port=free_port()), "-q")
    assert code == 4 and "cannot reach" in err and len(err.strip().splitlines()) == 1


def test_ssh_config_is_honoured(cli, lab, monkeypatch, tmp_path):
    """An entry with only a host alias: HostName, Port, User and IdentityFile come from
    ~/.ssh/config, the host key from ~/.ssh/known_hosts."""
    import getpass

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host labbox\n  HostName 127.0.0.1\n  Port {lab.sshd.port}\n  User {getpass.getuser()}\n"
        f"  IdentityFile {lab.sshd.client_key}\n")
    (home / ".ssh" / "known_hosts").write_text(lab.sshd.host_key_line())
    monkeypatch.setenv("HOME", str(home))
    inv = lab.root / "alias.toml"
    inv.write_text(f'[devices.local]\nhost = "labbox"\ntarget = "linux-x86"\n'
                   f'python = "{lab.sshd.python}"\nworkdir = "{lab.workdir}"\n')
    code, out, err = cli("devices", "check", "local", "--inventory", inv, "--json", "-q")
    assert code == 0, err
    assert json.loads(out)["address"] == f"{getpass.getuser()}@127.0.0.1:{lab.sshd.port}"
