"""The web family's parts that need no browser: the target and its graph rules, the browser
device in devices.toml, the loopback server's headers, and the web toolchain's digest checks
(issue 49). The browser itself is exercised under the `web` marker (tests/web)."""
from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from edgeforge.contracts import check_graph
from edgeforge.device.browser.serve import ISOLATION_HEADERS, LoopbackServer, resource_for
from edgeforge.device.link.inventory import load_inventory, render_device_toml
from edgeforge.errors import ConfigError
from edgeforge.targets import EpRules, load_target, resolve_target


def test_web_family_resolves_to_web_wasm_with_wasm_rules():
    assert resolve_target("web")[0] == "web-wasm"
    t = load_target("web")
    ep, rules = t.backend_config("onnx").first_provider()
    assert ep == "wasm" and rules.max_opset == 26 and t.hardware.arch == "wasm32"
    assert t.precision == "int8" and t.runtime.threads == 2


def _model(path, opset: int, domain: str = ""):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Relu" if not domain else "Gelu", ["x"], ["y"], domain=domain)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_check_graph_names_a_too_new_opset_and_a_foreign_domain(tmp_path):
    rules = load_target("web-wasm").backend_config("onnx").first_provider()[1]
    assert check_graph(_model(tmp_path / "ok.onnx", 26), rules) == []
    (v,) = check_graph(_model(tmp_path / "new.onnx", 27), rules)
    assert v.rule == "max_opset" and "27" in v.message and "26" in v.message
    assert check_graph(_model(tmp_path / "ms.onnx", 13, "com.microsoft"), rules) == []
    (v,) = check_graph(_model(tmp_path / "odd.onnx", 13, "org.example"), rules)
    assert v.rule == "domains" and v.op_type == "Gelu" and "org.example" in v.message
    assert check_graph(tmp_path / "odd.onnx", EpRules()) == []     # no graph rules: nothing checked


def test_a_browser_device_needs_no_host_and_keeps_its_keys(tmp_path):
    inv = tmp_path / "devices.toml"
    inv.write_text('[devices.chromium]\ntransport = "browser"\ntarget = "web-wasm"\nisolate = false\n'
                   '[devices.pi]\nhost = "pi.local"\ntarget = "rpi4"\nworkdir = "/home/pi/ef"\n')
    devs = load_inventory(inv).devices
    assert devs["chromium"].transport == "browser" and devs["chromium"].host == "127.0.0.1"
    assert devs["chromium"].isolate is False and devs["pi"].transport == "ssh"
    assert "transport" not in render_device_toml(devs["pi"]) and "isolate" not in render_device_toml(devs["pi"])
    inv.write_text('[devices.pi]\nhost = "pi.local"\ntarget = "rpi4"\nworkdir = "/w"\nisolate = true\n')
    with pytest.raises(ConfigError, match="isolate"):
        load_inventory(inv)
    inv.write_text('[devices.b]\ntransport = "carrier-pigeon"\ntarget = "web-wasm"\n')
    with pytest.raises(ConfigError, match="transport"):
        load_inventory(inv)


@pytest.mark.parametrize("isolate", [True, False])
def test_loopback_server_serves_its_table_only_with_or_without_coop_coep(isolate):
    table = {"/": resource_for("runner.html", data=b"<p>hi</p>"), "/m.wasm": resource_for("m.wasm", data=b"\0asm")}
    with LoopbackServer(table, isolate=isolate) as srv:
        assert srv.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(srv.url + "/m.wasm", timeout=10) as r:
            assert r.read() == b"\0asm" and r.headers["Content-Type"] == "application/wasm"
            for k, v in ISOLATION_HEADERS.items():
                assert r.headers.get(k) == (v if isolate else None)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(srv.url + "/../etc/passwd", timeout=10)
        assert err.value.code == 404
        req = urllib.request.Request(srv.url + "/", method="POST", data=b"x")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 501


def test_web_toolchain_checks_digests(tmp_path, monkeypatch):
    from edgeforge import toolchain_web as tw

    monkeypatch.setenv("EDGEFORGE_TOOLCHAINS", str(tmp_path / "tc"))
    assert tw.find_web() is None and tw.list_row()["installed"] is False
    with pytest.raises(ConfigError, match="toolchain install web"):
        tw.require_web()
    with pytest.raises(ConfigError, match="could not be run|npm"):
        tw.install_web(npm=str(tmp_path / "no-npm"))
    f = tmp_path / "x.bin"
    f.write_bytes(b"edgeforge")
    import base64
    import hashlib
    import json

    # the registry's form: sha512-<base64 of the digest>
    assert tw.sha512_integrity(f) == "sha512-" + base64.b64encode(hashlib.sha512(b"edgeforge").digest()).decode()
    root = tw.package_dir()
    root.mkdir(parents=True)
    names = [p.rsplit("/", 1)[1] for p in tw.FILES]
    for n in names:
        (root / n).write_bytes(n.encode())
    files = {n: hashlib.sha256(n.encode()).hexdigest() for n in names}
    doc = {"schema": tw.SCHEMA, "version": tw.VERSION, "integrity": tw.INTEGRITY, "files": files}
    (root / "toolchain.json").write_text(json.dumps(doc))
    assert tw.require_web().files == files
    (root / names[-1]).write_bytes(b"changed")
    with pytest.raises(ConfigError, match="sha256 differs"):
        tw.require_web()
    (root / "toolchain.json").write_text(json.dumps({**doc, "integrity": "sha512-other"}))
    assert tw.find_web() is None


def test_a_verb_that_needs_ssh_refuses_a_browser_device(tmp_path):
    from edgeforge.device.link.inventory import Device
    from edgeforge.device.link.session import connect

    dev = Device(name="chromium", transport="browser", target="web-wasm")
    with pytest.raises(ConfigError, match="is a browser") as err:
        connect(dev, connect_timeout=1)
    assert err.value.exit_code == 2


def test_report_shows_a_browser_beside_the_other_devices():
    from result_factory import PI4, make_result

    from edgeforge.report.report import build_summary
    from edgeforge.report.tables import report_tables

    browser = {**PI4, "cpu_model": "Intel(R) Xeon(R) Processor", "arch": "x86_64",
               "browser": "Chromium 156.0.8078.114 (headless)"}
    results = [make_result(device="pi-lab-3"),
               make_result(device="chromium", target="web-wasm", backend="onnx", fingerprint=browser,
                           runtime=("onnxruntime-web", "1.31.1"))]
    summary = build_summary([(None, r) for r in results])
    devices = next(t for t in report_tables(summary) if t.key == "devices")
    assert "browser" in devices.header
    col = devices.header.index("browser")
    by_device = {row[1]: row[col] for row in devices.rows}
    assert by_device == {"pi-lab-3": "-", "chromium": "Chromium 156.0.8078.114 (headless)"}
    # the browser is part of the stable fingerprint: same CPU and kernel, another device fingerprint
    from edgeforge.report.pairing import fingerprint_id

    no_browser = {k: v for k, v in browser.items() if k != "browser"}
    assert fingerprint_id(results[1]) != fingerprint_id(make_result(device="chromium", fingerprint=no_browser))
    assert fingerprint_id(results[0]) == fingerprint_id(make_result(device="pi-lab-3"))


def test_a_page_error_is_one_short_line():
    from edgeforge.device.measure.browser import page_message

    ort = ("failed to call OrtRun(). ERROR_CODE: 2, ERROR_MESSAGE: /s/onnxruntime/core/framework/op_kernel.cc:87 "
           "virtual OrtValue *onnxruntime::OpKernelContext::OutputMLValue(int, const TensorShape &) "
           "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Tensor shape is too large")
    assert page_message(ort) == "OrtRun failed: INVALID_ARGUMENT: Tensor shape is too large"
    assert page_message("failed to call OrtRun(). ERROR_CODE: 6, ERROR_MESSAGE: std::bad_alloc") == \
        "OrtRun failed: std::bad_alloc"
    assert page_message("RuntimeError: Aborted().\nmore") == "RuntimeError: Aborted(). more"
    assert len(page_message("x" * 1000)) == 240 and page_message(None) == "no message"
