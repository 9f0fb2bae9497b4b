"""issue 44: the remote cache's deadlines and size caps, through the real CLI against a small
HTTP cache server on 127.0.0.1 (GET/HEAD/PUT in memory, as nginx's dav module answers) that can
misbehave on purpose: trickle a body a byte a second, trickle its headers, claim a 3 GiB index
or an 8 GiB archive. Past a deadline or a cap: one warning line, a local build, exit 0. A URL
that cannot be asked is exit 2 naming where it came from; the user config is strict."""
from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path

import pytest
from edgeforge.manifest import CacheSource

from helpers import run_cli, tiny_project

SMALL = '''
import paddle
from paddle import nn


def build():
    paddle.seed(SEED)
    return nn.Sequential(nn.Conv2D(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 8 * 8, 3))
'''
TIMEOUT_S = 2.0


class Store(http.server.ThreadingHTTPServer):
    """``/<mode>/<key>.(json|tar)``: one store for every mode; ``mode`` says how to misbehave.
    ``cut``: when the server saw each misbehaving answer end (the client gone), by mode."""

    daemon_threads = True

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.began: dict[str, float] = {}
        self.ended: dict[str, float] = {}
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{mode}"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):        # quiet
        pass

    def _split(self) -> tuple[str, str]:
        mode, _, name = self.path.lstrip("/").partition("/")
        return mode, name

    def do_PUT(self):
        _, name = self._split()
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if name in self.server.files:
            self._answer(412, b"")
            return
        self.server.files[name] = body
        self._answer(201, b"")

    def do_HEAD(self):
        _, name = self._split()
        self.send_response(200 if name in self.server.files else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        mode, name = self._split()
        body = self.server.files.get(name)
        if body is None:
            self._answer(404, b"")
            return
        kind = "index" if name.endswith(".json") else "archive"
        if mode == "claim-index" and kind == "index":
            self._answer(200, body, length=3 << 30)                  # 3 GiB, and it sends what it has
        elif mode == "claim-archive" and kind == "archive":
            self._answer(200, body, length=8 << 30)
        elif mode == "huge-index" and kind == "index":
            rec = json.loads(body)
            rec["archive"]["size"] = 8 << 30
            self._answer(200, json.dumps(rec).encode())
        elif mode == f"trickle-{kind}":
            self._trickle(mode, body, headers_too=False)
        elif mode == "trickle-headers":
            self._trickle(mode, body, headers_too=True)
        else:
            self._answer(200, body)

    def _answer(self, status: int, body: bytes, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        try:
            self.wfile.write(body)
            self.wfile.flush()
        except OSError:
            pass

    def _trickle(self, mode: str, body: bytes, headers_too: bool) -> None:
        """A byte a second (of the headers too, with ``headers_too``) until the client goes."""
        self.server.began.setdefault(mode, time.monotonic())
        head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        data = head + body if headers_too else body
        try:
            if not headers_too:
                self.wfile.write(head)
            for i in range(len(data)):
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
                time.sleep(1.0)
        except OSError:
            pass
        finally:
            self.server.ended.setdefault(mode, time.monotonic())
            self.close_connection = True


@pytest.fixture(scope="module")
def store():
    s = Store()
    yield s
    s.shutdown()
    s.server_close()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return tiny_project(tmp_path_factory.mktemp("p") / "p", "deadline", SMALL.replace("SEED", "44"),
                        [-1, 3, 8, 8], samples=8)


def build(project: Path, base: Path, *flags: str, env: dict | None = None):
    t0 = time.monotonic()
    r = run_cli("build", str(project), "--target", "jetson-orin", "--out", str(base / "out"), *flags,
                env={"EDGEFORGE_CACHE": str(base / "cache"), "XDG_CONFIG_HOME": str(base / "xdg"),
                     **(env or {})}, timeout=900)
    r.wall_s = time.monotonic() - t0
    return r


def sources(out: Path) -> dict[str, str]:
    return {s["pass"]: CacheSource(s["source"]).label for s in json.loads((out / "manifest.json").read_text())["steps"]}


def warnings(r) -> list[str]:
    """Each warning whole (its folded lines joined); every line of it fits 80 columns."""
    out: list[list[str]] = []
    for ln in r.stderr.splitlines():
        if ln.startswith("warning:"):
            out.append([ln])
        elif out and ln.startswith("  ") and not ln.lstrip().startswith(("export", "legalize", "convert",
                                                                         "quantize", "verify")):
            out[-1].append(ln)
    assert all(len(ln) <= 80 for w in out for ln in w), out
    return [" ".join(ln.strip() for ln in w) for w in out]


@pytest.fixture(scope="module")
def filled(store, project, tmp_path_factory):
    """A first build that uploads every step to the store; its wall time is the local build's."""
    base = tmp_path_factory.mktemp("first")
    r = build(project, base, "--remote-cache", store.url("ok"))
    assert r.returncode == 0 and not warnings(r), r.stdout + r.stderr
    assert set(sources(base / "out").values()) == {"miss"}
    assert any(n.endswith(".tar") for n in store.files)
    return r


@pytest.mark.slow
def test_a_good_store_serves_every_step(store, project, filled, tmp_path):
    r = build(project, tmp_path, "--remote-cache", store.url("ok"))
    assert r.returncode == 0 and not warnings(r), r.stderr
    assert set(sources(tmp_path / "out").values()) == {"remote hit"}


# the default suite keeps the trickled index (40-65 s each on 2 loaded cores); the trickled archive
# and headers, the same deadline on the other requests, run under make test-slow
@pytest.mark.parametrize("mode", ["trickle-index", pytest.param("trickle-archive", marks=pytest.mark.slow),
                                  pytest.param("trickle-headers", marks=pytest.mark.slow)])
def test_a_trickling_server_costs_at_most_three_timeouts(store, project, filled, tmp_path, mode):
    """Done when: a build against a store that sends a byte a second (a body, or even its
    headers) finishes within 3 x --remote-timeout plus the local build's time. The server sees
    the client go within 3 x the timeout of its first trickled byte (a deadline, not an idle
    timeout); the build warns once and builds every step here."""
    r = build(project, tmp_path, "--remote-cache", store.url(mode), "--remote-timeout", str(TIMEOUT_S),
              "--remote-cache-mode", "read")
    text = r.stdout + r.stderr
    assert r.returncode == 0 and "Traceback" not in text, text[-3000:]
    said = warnings(r)
    assert len(said) == 1 and f"within {TIMEOUT_S:g} s" in said[0] and "building locally" in r.stderr, said
    assert set(sources(tmp_path / "out").values()) == {"miss"}
    local = filled.wall_s
    print(f"{mode}: build {r.wall_s:.1f} s, the local build {local:.1f} s, timeout {TIMEOUT_S:g} s")
    # the local build's own time varies on a loaded machine: half of it again is allowed for that
    assert r.wall_s <= local * 1.5 + 3 * TIMEOUT_S, (r.wall_s, local)
    if mode != "trickle-headers":           # the socket is shut as the deadline passes (the server
        # learns it at its second write after that: one trickle interval, 1 s, later)
        assert store.ended[mode] - store.began[mode] <= 3 * TIMEOUT_S + 1.0


# the default suite keeps the 3 GiB index (41 s on 2 loaded cores); the same cap check on the
# archive's Content-Length (37 s) and on an index naming a huge archive run under make test-slow
@pytest.mark.parametrize("mode, why", [
    ("claim-index", "its index claims 3221225472 bytes"),
    pytest.param("huge-index", "claims a 8589934592-byte archive", marks=pytest.mark.slow),
    pytest.param("claim-archive", "its archive claims 8589934592 bytes", marks=pytest.mark.slow),
])
def test_a_body_over_its_cap_is_refused_before_it_is_read(store, project, filled, tmp_path, mode, why):
    """A 3 GiB index, an index naming an 8 GiB archive, an archive whose Content-Length says
    8 GiB: each step warns once (naming the claim) and is built here; nothing is allocated."""
    r = build(project, tmp_path, "--remote-cache", store.url(mode), "--remote-cache-mode", "read")
    text = r.stdout + r.stderr
    assert r.returncode == 0 and "Traceback" not in text, text[-3000:]
    said = " ".join(warnings(r))
    assert why in said and "building it locally" in said, text[-2000:]
    assert set(sources(tmp_path / "out").values()) == {"miss"}


@pytest.mark.parametrize("url, why", [
    ("http://127.0.0.1:99999/x", "Port out of range"),
    ("http://[::1", "Invalid IPv6 URL"),
    ("ftp://cache.example/x", "not an http:// or https:// URL"),
    ("http:///x", "no host"),
])
def test_a_bad_url_is_exit_2_naming_where_it_came_from(project, tmp_path, url, why):
    env = {"EDGEFORGE_CACHE": str(tmp_path / "cache"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    runs = {"--remote-cache": build(project, tmp_path / "a", "--remote-cache", url),
            "$EDGEFORGE_REMOTE_CACHE": run_cli("cache", "stats", env={**env, "EDGEFORGE_REMOTE_CACHE": url})}
    config = tmp_path / "xdg" / "edgeforge" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f"[cache]\nremote = {json.dumps(url)}\n")
    runs["[cache] remote"] = run_cli("cache", "stats", env=env)
    for source, r in runs.items():
        assert r.returncode == 2, (source, r.stdout, r.stderr)
        assert r.stdout == "" and "Traceback" not in r.stderr
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and source in errors[0] and why in errors[0], r.stderr
    assert not (tmp_path / "a" / "out").exists()


@pytest.mark.parametrize("text, said", [
    ('[cache]\nremot = "http://127.0.0.1:1/x"\n', "unknown key 'cache.remot' (did you mean 'remote'?)"),
    ('[cache]\ntimout = 3\n', "unknown key 'cache.timout' (did you mean 'timeout'?)"),
    ('[cach]\nremote = "http://127.0.0.1:1/x"\n', "unknown key 'cach' (did you mean 'cache'?)"),
    ('[cache]\ntimeout = inf\n', "cache.timeout"),
    ('[cache]\ntimeout = -1\n', "cache.timeout"),
    ('[cache]\nmode = "sometimes"\n', "cache.mode"),
    ('cache = 3\n', "cache"),
])
def test_the_user_config_is_strict(tmp_path, text, said):
    config = tmp_path / "xdg" / "edgeforge" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(text)
    r = run_cli("cache", "stats", env={"EDGEFORGE_CACHE": str(tmp_path / "cache"),
                                       "XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and str(config) in errors[0] and said in errors[0], r.stderr
