"""``edgeforge devices check NAME`` for a browser device: what a browser bench needs, checked for
real. Chromium and chromedriver found and of one major version, selenium importable,
onnxruntime-web installed with its files' digests, and a page from the loopback server opened in
the headless browser: cross-origin isolated (with ``isolate``) and WebAssembly SIMD. The report
has the shape of the SSH check's (:func:`edgeforge.device.link.check.check_device`)."""
from __future__ import annotations

import platform
import re
import subprocess
import sys

from ...errors import ConfigError
from ...runner.device_facts import fingerprint
from ..link.inventory import Device
from .chromium import DEFAULT_BROWSERS, DEFAULT_DRIVERS, Chromium, find_binary, selenium_module
from .serve import LoopbackServer, resource_for

PROBE_PAGE = (b"<!doctype html><title>edgeforge check</title><script>window.__probe = {"
              b"isolated: self.crossOriginIsolated === true, sab: typeof SharedArrayBuffer !== 'undefined',"
              b"simd: WebAssembly.validate(new Uint8Array([0,97,115,109,1,0,0,0,1,5,1,96,0,1,123,3,2,1,0,10,10,1,8,"
              b"0,65,0,253,15,253,98,11])), cores: navigator.hardwareConcurrency, ua: navigator.userAgent};"
              b"</script>")


def _version(path: str) -> str | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"\d+(\.\d+)+", out or "")
    return m.group(0) if m else None


def _found(path_of, *args) -> dict:
    try:
        path = path_of(*args)
    except ConfigError as exc:
        return {"present": False, "error": exc.one_line()}
    return {"present": True, "path": path, "version": _version(path)}


def check_browser(dev: Device, timeout_s: float = 60.0) -> dict:
    from ...toolchain_web import PACKAGE, VERSION, find_web

    rts = {"chromium": _found(find_binary, dev.browser, DEFAULT_BROWSERS, "chromium"),
           "chromedriver": _found(find_binary, dev.driver, DEFAULT_DRIVERS, "chromedriver")}
    try:
        selenium_module()
        from selenium import __version__ as sel_version
        rts["selenium"] = {"present": True, "version": sel_version}
    except ConfigError as exc:
        rts["selenium"] = {"present": False, "error": exc.one_line()}
    try:
        web = find_web(check=True)
        rts[PACKAGE] = ({"present": True, "version": web.version, "path": str(web.root)} if web else
                        {"present": False, "error": f"{VERSION} not installed: edgeforge toolchain install web"})
    except ConfigError as exc:
        rts[PACKAGE] = {"present": False, "error": exc.one_line()}
    major = {k: (rts[k].get("version") or "").split(".")[0] for k in ("chromium", "chromedriver")}
    checks = [{"check": k, "required": True, "ok": rts[k]["present"],
               "detail": f"{rts[k].get('path', '')} {rts[k].get('version') or ''}".strip() if rts[k]["present"]
               else rts[k]["error"]} for k in ("chromium", "chromedriver", "selenium", PACKAGE)]
    checks.append({"check": "one major version", "required": True, "ok": bool(major["chromium"])
                   and major["chromium"] == major["chromedriver"],
                   "detail": f"chromium {major['chromium'] or '?'}, chromedriver {major['chromedriver'] or '?'}"})
    probe = _probe_page(dev, timeout_s) if all(c["ok"] for c in checks[:3]) else {"error": "not opened"}
    isolated = probe.get("isolated") is True
    checks.append({"check": "cross-origin isolated", "required": dev.isolate, "ok": isolated,
                   "detail": probe.get("error") or ("SharedArrayBuffer present: threads work" if isolated else
                                                    "no SharedArrayBuffer: 1 thread only")})
    checks.append({"check": "wasm SIMD", "required": True, "ok": probe.get("simd") is True,
                   "detail": probe.get("error") or ("WebAssembly.validate of a v128 module" if probe.get("simd")
                                                    else "not supported")})
    fp = fingerprint()
    return {"device": dev.name, "address": "headless Chromium on this host", "target": dev.target,
            "default_backend": "onnx", "transport": "browser",
            "python": {"version": platform.python_version(), "executable": sys.executable},
            "fingerprint": fp, "runtimes": rts, "checks": checks, "page": probe, "recorded_host_keys": [],
            "matches": all(c["ok"] for c in checks if c["required"])}


def _probe_page(dev: Device, timeout_s: float) -> dict:
    ch = Chromium(dev.browser, dev.driver, load_timeout_s=timeout_s)
    try:
        with LoopbackServer({"/": resource_for("index.html", data=PROBE_PAGE)}, isolate=dev.isolate) as srv:
            try:
                ch.start()
            except RuntimeError as exc:
                return {"error": str(exc)}
            ch.deadline(timeout_s)
            try:
                ch.driver.get(srv.url + "/")
                got = ch.driver.execute_script("return window.__probe || null;")
            except Exception as exc:  # noqa: BLE001 - selenium's errors of a page that did not load: one line
                return {"error": f"the probe page did not load: {str(exc).strip().splitlines()[0][:200]}"}
            return dict(got or {"error": "the probe page ran no script"}, browser_version=ch.version)
    finally:
        ch.close()
