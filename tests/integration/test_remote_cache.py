"""The remote build cache (issue 29) against a real nginx with its WebDAV module, started on
loopback by the tests (TOOLCHAIN item 23). Each test uses its own URL prefix on the server (its
own store); two cache directories stand in for two CI runners."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from edgeforge.manifest import CacheSource

from helpers import copy_project, run_cli, tiny_project

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").is_file() else None)
TOKEN = "s3cret-token-29-do-not-print"
SMALL = '''
import paddle
from paddle import nn


def build():
    paddle.seed(SEED)
    return nn.Sequential(nn.Conv2D(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 4))
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, up: bool = True, deadline_s: float = 20.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            if up:
                return
        except OSError:
            if not up:
                return
        time.sleep(0.05)
    raise AssertionError(f"port {port} did not {'open' if up else 'close'} within {deadline_s} s")


class Nginx:
    """nginx on loopback serving ``root`` over WebDAV; ``/auth/`` wants the bearer token."""

    def __init__(self, base: Path):
        if NGINX is None:
            pytest.skip("nginx is not installed (Debian: apt-get install nginx)")
        self.dir, self.root, self.port = base, base / "store", free_port()
        self.root.mkdir(parents=True)
        (self.root / "auth").mkdir()
        (base / "htpasswd").write_text("ci:{PLAIN}pw-29\n")
        user = "user root;\n" if os.geteuid() == 0 else ""
        temps = "\n".join(f"  {k}_temp_path {base}/{k};" for k in ("client_body", "proxy", "fastcgi",
                                                                      "uwsgi", "scgi"))
        (base / "nginx.conf").write_text(f"""{user}daemon off;
worker_processes 1;
pid {base}/nginx.pid;
error_log {base}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log {base}/access.log;
{temps}
  client_max_body_size 0;
  server {{
    listen 127.0.0.1:{self.port};
    root {self.root};
    location / {{
      dav_methods PUT DELETE MKCOL;
      create_full_put_path on;
      dav_access user:rw group:r all:r;
    }}
    location /auth/ {{
      if ($http_authorization != "Bearer {TOKEN}") {{ return 401; }}
      dav_methods PUT DELETE MKCOL;
      create_full_put_path on;
    }}
    location /basic/ {{
      auth_basic "edgeforge cache";
      auth_basic_user_file {base}/htpasswd;
      dav_methods PUT;
      create_full_put_path on;
    }}
  }}
}}
""")
        self.proc = None
        self.start()

    def url(self, prefix: str) -> str:
        return f"http://127.0.0.1:{self.port}/{prefix}"

    def start(self) -> None:
        self.proc = subprocess.Popen([NGINX, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf"),
                                      "-e", str(self.dir / "error.log")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        wait_port(self.port, up=False)


@pytest.fixture(scope="module")
def nginx(tmp_path_factory):
    server = Nginx(tmp_path_factory.mktemp("nginx"))
    yield server
    server.stop()


CODE: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def code_snapshot(tmp_path_factory):
    """The builds of this module run one copy of edgeforge: an edit to the checkout while the
    tests run (the build code is in every key) cannot split runner A's keys from runner B's."""
    import edgeforge

    pkg = Path(edgeforge.__file__).resolve().parent
    snap = tmp_path_factory.mktemp("code")
    shutil.copytree(pkg, snap / "edgeforge", ignore=shutil.ignore_patterns("__pycache__"))
    if (pkg.parent / "targets").is_dir():
        shutil.copytree(pkg.parent / "targets", snap / "targets")
    CODE["PYTHONPATH"] = os.pathsep.join([str(snap)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    yield
    CODE.clear()


def snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def build(project: Path, cache: Path, out: Path, *flags: str, env: dict | None = None):
    t0 = time.monotonic()
    r = run_cli("build", str(project), "--target", "jetson-orin", "--out", str(out), *flags,
                env={"EDGEFORGE_CACHE": str(cache), "XDG_CONFIG_HOME": str(cache.parent / "xdg"),
                     **CODE, **(env or {})})
    r.wall_s = time.monotonic() - t0
    return r


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def sources(out: Path) -> dict[str, str]:
    return {s["pass"]: CacheSource(s["source"]).label for s in manifest(out)["steps"]}


def warnings(r) -> list[str]:
    """Each warning whole: its ``warning:`` line and the indented lines it was folded into.
    Every line of it fits 80 columns unless it is one word (a long URL)."""
    out: list[list[str]] = []
    for ln in r.stderr.splitlines():
        if ln.startswith("warning:"):
            out.append([ln])
        elif out and ln.startswith("  ") and len(out[-1]) < 20:
            out[-1].append(ln)
    for w in out:
        assert all(len(ln) <= 80 or " " not in ln.strip() for ln in w), w
    return [" ".join(ln.strip() for ln in w) for w in out]


def assert_clean(r, warned: int) -> None:
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    assert "Traceback" not in text
    assert len(warnings(r)) == warned, text[-3000:]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small project: every test that needs no trained model builds this one."""
    def make(seed: int) -> Path:
        src = SMALL.replace("SEED", str(seed))
        return tiny_project(tmp_path_factory.mktemp("small") / "p", f"small{seed}", src, [-1, 3, 8, 8], samples=16)
    return make


@pytest.fixture(scope="module")
def cold(nginx, digits_project, tmp_path_factory):
    """Runner A: the digits project for jetson-orin, cold, against an empty store (uploads)."""
    base = tmp_path_factory.mktemp("runner-a")
    proj = copy_project(digits_project, base / "digits")
    r = build(proj, base / "cache", base / "out", "--remote-cache", nginx.url("fleet"))
    assert_clean(r, 0)
    assert set(sources(base / "out").values()) == {"miss"}
    return {"project": proj, "base": base, "run": r, "out": base / "out",
            "sha": manifest(base / "out")["artifact"]["sha256"]}


def test_a_second_runner_rebuilds_from_the_remote_cache(cold, nginx, tmp_path):
    """Done when: empty cache B, same --remote-cache: every step a remote hit, the same
    artifact sha256, in under 25 % of A's cold wall time."""
    b = build(cold["project"], tmp_path / "cache", tmp_path / "out", "--remote-cache", nginx.url("fleet"))
    assert_clean(b, 0)
    assert set(sources(tmp_path / "out").values()) == {"remote hit"}, sources(tmp_path / "out")
    assert {s["source"] for s in manifest(tmp_path / "out")["steps"]} == {"remote"}
    assert manifest(tmp_path / "out")["artifact"]["sha256"] == cold["sha"]
    assert "remote hit" in b.stdout
    ratio = b.wall_s / cold["run"].wall_s
    print(f"cold A {cold['run'].wall_s:.1f} s, remote-hit B {b.wall_s:.1f} s ({ratio:.0%}), sha256 {cold['sha']}")
    assert ratio < 0.25, f"B took {b.wall_s:.1f} s, A {cold['run'].wall_s:.1f} s"
    stats = run_cli("cache", "stats", env={"EDGEFORGE_CACHE": str(tmp_path / "cache"), **CODE})
    assert "remote: 5 hits, 0 misses" in stats.stdout, stats.stdout
    assert " 0 B down" not in stats.stdout
    again = build(cold["project"], tmp_path / "cache", tmp_path / "out", "--remote-cache", nginx.url("fleet"))
    assert_clean(again, 0)
    assert set(sources(tmp_path / "out").values()) == {"hit"}      # copied into the local cache


def _damage(how: str, store: Path, key: str) -> None:
    tar, index = store / f"{key}.tar", store / f"{key}.json"
    if how == "tampered":                       # one byte of the archive
        body = bytearray(tar.read_bytes())
        body[len(body) // 2] ^= 0x01
        tar.write_bytes(bytes(body))
    elif how == "truncated":
        tar.write_bytes(tar.read_bytes()[:-700])
    else:                                       # the index names another archive
        rec = json.loads(index.read_text())
        rec["archive"]["sha256"] = hashlib.sha256(b"another archive").hexdigest()
        index.write_text(json.dumps(rec))


@pytest.mark.parametrize("how", ["tampered", pytest.param("truncated", marks=pytest.mark.slow),
                                 pytest.param("wrong index", marks=pytest.mark.slow)])
def test_a_damaged_remote_entry_is_a_miss_rebuilt_locally(cold, nginx, tmp_path, how):
    store = nginx.root / "fleet"
    key = next(s["cache_key"] for s in manifest(cold["out"])["steps"] if s["pass"] == "convert.onnx")
    saved = {p: p.read_bytes() for p in (store / f"{key}.tar", store / f"{key}.json")}
    try:
        _damage(how, store, key)
        before = snapshot(store)
        r = build(cold["project"], tmp_path / "cache", tmp_path / "out", "--remote-cache", nginx.url("fleet"))
        assert_clean(r, 1)
        assert "convert.onnx" in warnings(r)[0] and "building it locally" in warnings(r)[0]
        got = sources(tmp_path / "out")
        assert got.pop("convert.onnx") == "miss" and set(got.values()) == {"remote hit"}, got
        assert manifest(tmp_path / "out")["artifact"]["sha256"] == cold["sha"]
        assert snapshot(store) == before                 # the server's entry is left as it is
    finally:
        for p, data in saved.items():
            p.write_bytes(data)


@pytest.mark.slow
def test_an_index_cannot_change_more_than_measurements(cold, nginx, tmp_path):
    """The index's ``measured`` goes back only into measured fields: a forged verify status or
    artifact file in it changes nothing."""
    store = nginx.root / "fleet"
    key = next(s["cache_key"] for s in manifest(cold["out"])["steps"] if s["pass"] == "verify")
    index = store / f"{key}.json"
    saved = index.read_bytes()
    try:
        rec = json.loads(saved)
        rec["measured"] += [[["verify", "status"], "forged"], [["file"], "../../evil"]]
        index.write_text(json.dumps(rec))
        r = build(cold["project"], tmp_path / "cache", tmp_path / "out", "--remote-cache", nginx.url("fleet"))
        assert_clean(r, 0)
        m = manifest(tmp_path / "out")
        assert m["verify"]["status"] == manifest(cold["out"])["verify"]["status"] != "forged"
        assert m["artifact"]["sha256"] == cold["sha"] and m["artifact"]["path"] == "model.onnx"
    finally:
        index.write_bytes(saved)


def test_nginx_stopped_mid_build_is_one_warning_and_exit_0(small, tmp_path):
    server = Nginx(tmp_path / "nginx")
    proj = small(1)
    first_upload = server.root / "mid"
    env = {"EDGEFORGE_CACHE": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"), **CODE}
    exe = Path(sys.executable).with_name("edgeforge")
    proc = subprocess.Popen([str(exe), "build", str(proj), "--target", "jetson-orin", "--out", str(tmp_path / "out"),
                             "--remote-cache", server.url("mid")], env=dict(os.environ, **env, COLUMNS="120"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 300
        while not list(first_upload.glob("*.json")):      # export's entry is on the server
            assert proc.poll() is None and time.monotonic() < end, proc.communicate()
            time.sleep(0.1)
    finally:
        server.stop()
    stdout, stderr = proc.communicate(timeout=600)
    r = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert_clean(r, 1)
    assert "not reachable" in warnings(r)[0]
    assert sources(tmp_path / "out")["export"] == "miss"


class DelayProxy(socketserver.ThreadingTCPServer):
    """A loopback proxy that waits ``delay`` s before passing a connection on to ``port``."""

    daemon_threads = allow_reuse_address = True

    def __init__(self, port: int, delay: float):
        self.target, self.delay = port, delay

        class Handler(socketserver.BaseRequestHandler):
            def handle(inner):
                time.sleep(self.delay)
                try:
                    up = socket.create_connection(("127.0.0.1", self.target))
                except OSError:
                    return
                def pump(a, b):
                    try:
                        while data := a.recv(65536):
                            b.sendall(data)
                    except OSError:
                        pass
                    finally:
                        for s in (a, b):
                            try:
                                s.shutdown(socket.SHUT_RDWR)
                            except OSError:
                                pass
                t = threading.Thread(target=pump, args=(up, inner.request), daemon=True)
                t.start()
                pump(inner.request, up)
                t.join(timeout=30)
                up.close()
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def url(self, prefix: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{prefix}"


@pytest.mark.slow
def test_a_slow_server_is_one_warning_and_the_build_goes_on(nginx, small, tmp_path):
    proxy = DelayProxy(nginx.port, delay=4.0)
    try:
        r = build(small(2), tmp_path / "cache", tmp_path / "out", "--remote-cache", proxy.url("slow"),
                  "--remote-timeout", "0.5")
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert_clean(r, 1)
    assert "no answer within 0.5 s" in warnings(r)[0]
    assert set(sources(tmp_path / "out").values()) == {"miss"}
    assert not (nginx.root / "slow").exists()


def test_read_mode_uploads_nothing(nginx, small, tmp_path):
    """The URL from the user config file ([cache] remote), the mode from the flag."""
    before = snapshot(nginx.root)
    config = tmp_path / "xdg" / "edgeforge" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[cache]\nremote = "{nginx.url("fleet")}"\n')
    r = build(small(3), tmp_path / "cache", tmp_path / "out", "--remote-cache-mode", "read")
    assert_clean(r, 0)
    assert set(sources(tmp_path / "out").values()) == {"miss"}
    assert snapshot(nginx.root) == before
    asked = (nginx.dir / "access.log").read_text()
    for step in manifest(tmp_path / "out")["steps"]:                # it did look there
        assert f"GET /fleet/{step['cache_key']}.json" in asked


@pytest.mark.slow
def test_two_builds_uploading_the_same_keys_at_once(nginx, small, tmp_path):
    proj, url = small(4), nginx.url("race")
    runs = []

    def one(i):
        runs.append(build(proj, tmp_path / f"cache{i}", tmp_path / f"out{i}", "--remote-cache", url))
    threads = [threading.Thread(target=one, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in runs:
        assert_clean(r, 0)
    store = nginx.root / "race"
    for index in store.glob("*.json"):                   # every index names the archive beside it
        rec = json.loads(index.read_text())
        assert hashlib.sha256((store / f"{rec['key']}.tar").read_bytes()).hexdigest() == rec["archive"]["sha256"]
    third = build(proj, tmp_path / "cache3", tmp_path / "out3", "--remote-cache", url)
    assert_clean(third, 0)
    assert set(sources(tmp_path / "out3").values()) == {"remote hit"}
    shas = {manifest(tmp_path / f"out{i}")["artifact"]["sha256"] for i in (1, 2, 3)}
    assert len(shas) == 1


def test_the_bearer_token_is_sent_and_never_written(nginx, small, tmp_path):
    proj, url = small(5), nginx.url("auth/t")
    env = {"EDGEFORGE_REMOTE_CACHE_TOKEN": TOKEN}
    first = build(proj, tmp_path / "c1", tmp_path / "o1", "--remote-cache", url, env=env)
    second = build(proj, tmp_path / "c2", tmp_path / "o2", env={**env, "EDGEFORGE_REMOTE_CACHE": url})
    assert_clean(first, 0)
    assert_clean(second, 0)
    assert set(sources(tmp_path / "o2").values()) == {"remote hit"}      # the server took the token
    for r in (first, second):       # (without the token: test_netrc_... below, the 401 case)
        assert TOKEN not in r.stdout + r.stderr
    for d in ("c1", "c2", "o1", "o2"):
        for p in (tmp_path / d).rglob("*"):
            if p.is_file():
                assert TOKEN.encode() not in p.read_bytes(), p


def _tar(members) -> bytes:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type, info.linkname = (tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE), data
                tar.addfile(info)
    return buf.getvalue()


ENTRY = json.dumps({"pass": "export", "content_digest": "x", "meta": {}}).encode()


@pytest.mark.parametrize("member", [
    ("/etc/evil", "file", b"x"), ("artifact/../../evil", "file", b"x"), ("elsewhere.txt", "file", b"x"),
    ("artifact/link", "symlink", "/etc/passwd"), ("artifact/hard", "hardlink", "entry.json"),
])
def test_an_archive_unpacks_only_inside_its_entry(tmp_path, member):
    from edgeforge.remote_cache import unpack

    dest = tmp_path / "entry"
    dest.mkdir()
    body = _tar([("entry.json", "file", ENTRY), ("artifact/model.pdmodel", "file", b"m"), member])
    assert "may not" in unpack(body, dest, "export")
    assert not (tmp_path / "evil").exists() and list(dest.rglob("*")) == []


def test_an_archive_of_another_pass_or_not_a_tar_is_refused(tmp_path):
    from edgeforge.remote_cache import unpack

    body = _tar([("entry.json", "file", ENTRY), ("artifact/model.onnx", "file", b"m")])
    assert unpack(body, tmp_path / "a", "quantize.onnx") == "its archive is another pass's entry"
    assert unpack(b"not a tar at all" * 100, tmp_path / "b", "export") == "its archive is not a tar"
    assert unpack(body, tmp_path / "c", "export") == ""


def test_remote_settings_come_from_flag_env_then_config(tmp_path, monkeypatch):
    from edgeforge.errors import ConfigError
    from edgeforge.remote_cache import RemoteSettings, redact

    for var in ("EDGEFORGE_REMOTE_CACHE", "EDGEFORGE_REMOTE_CACHE_MODE", "EDGEFORGE_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert RemoteSettings.resolve() is None
    (tmp_path / "edgeforge").mkdir()
    (tmp_path / "edgeforge" / "config.toml").write_text('[cache]\nremote = "http://c/x"\ntimeout = 3\n')
    assert RemoteSettings.resolve() == RemoteSettings("http://c/x", "readwrite", 3.0)
    monkeypatch.setenv("EDGEFORGE_REMOTE_CACHE", "https://e/y/")
    assert RemoteSettings.resolve().url == "https://e/y"
    assert RemoteSettings.resolve("http://f/z", "read").mode == "read"
    assert RemoteSettings.resolve(mode="off") is None
    with pytest.raises(ConfigError, match="not an http"):
        RemoteSettings.resolve("ftp://host/x")
    with pytest.raises(ConfigError, match="not one of"):
        RemoteSettings.resolve(mode="sometimes")
    assert redact("http://bob:hunter2@host:8080/p?q=1") == "http://host:8080/p"


@pytest.mark.slow
def test_netrc_credentials_publish_and_read_an_entry(nginx, tmp_path, monkeypatch):
    """Basic auth from a netrc (requests reads $NETRC), through the library: an entry put in one
    cache is published, read into another with every file checked; without the netrc entry the
    server says 401: one warning, a miss."""
    from edgeforge.cache import Cache
    from edgeforge.remote_cache import Remote, RemoteSettings

    (tmp_path / "netrc").write_text("machine 127.0.0.1 login ci password pw-29\n")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.delenv("EDGEFORGE_REMOTE_CACHE_TOKEN", raising=False)
    produced = tmp_path / "produced"
    (produced / "sub").mkdir(parents=True)
    (produced / "model.onnx").write_bytes(b"\x00model" * 100)
    (produced / "sub" / "ref.npz").write_bytes(b"ref")
    key = hashlib.sha256(b"netrc entry").hexdigest()
    a, b = Cache(tmp_path / "a"), Cache(tmp_path / "b")
    a.put(key, produced, {"pass": "export", "version": 1, "meta": {"file": "model.onnx"}},
          measured=[[["int8_vs_fp32"], {"fp32_p50_ms": 1.0}]])
    said: list[str] = []
    remote = Remote(RemoteSettings(nginx.url("basic/n"), "readwrite", 5.0), warn=said.append)
    remote.publish(key, a, "export", [[["int8_vs_fp32"], {"fp32_p50_ms": 1.0}]])
    assert said == [] and (nginx.root / "basic" / "n" / f"{key}.tar").is_file()
    path, entry = remote.fetch(key, b, "export")
    assert (path / "sub" / "ref.npz").read_bytes() == b"ref" and entry["meta"] == {"file": "model.onnx"}
    assert entry["measured"] == [[["int8_vs_fp32"], {"fp32_p50_ms": 1.0}]]
    assert b.stats()["remote_hits"] == 1 and b.stats()["bytes_downloaded"] > 0
    (tmp_path / "netrc").write_text("machine elsewhere login ci password pw-29\n")
    other = Remote(RemoteSettings(nginx.url("basic/n"), "readwrite", 5.0), warn=said.append)
    assert other.fetch(key, Cache(tmp_path / "c"), "export") is None
    assert other.fetch(hashlib.sha256(b"x").hexdigest(), Cache(tmp_path / "c"), "export") is None
    assert len(said) == 1 and "refused (HTTP 401" in said[0] and "pw-29" not in said[0]
