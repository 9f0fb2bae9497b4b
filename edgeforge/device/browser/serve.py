"""The loopback HTTP server a browser bench loads its page from.

It serves a fixed table of paths (the runner page, onnxruntime-web's files, the artifact and the
reference inputs as raw little-endian bytes), nothing else: every other path is 404, and only
GET and HEAD are answered. With ``isolate`` (the default) every answer carries
``Cross-Origin-Opener-Policy: same-origin`` and ``Cross-Origin-Embedder-Policy: require-corp``,
which make the page cross-origin isolated: without them a browser hides SharedArrayBuffer and
onnxruntime-web runs one thread, silently. It listens on 127.0.0.1 on a free port, in a daemon
thread, until :meth:`LoopbackServer.close`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ISOLATION_HEADERS = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".mjs": "text/javascript; charset=utf-8", ".wasm": "application/wasm",
         ".json": "application/json", ".onnx": "application/octet-stream", ".bin": "application/octet-stream"}


@dataclass(frozen=True)
class Resource:
    """One served path: the bytes, or a file read when asked."""
    data: bytes | None = None
    file: Path | None = None
    content_type: str = "application/octet-stream"

    def body(self) -> bytes:
        if self.data is not None:
            return self.data
        return Path(self.file).read_bytes()


def resource_for(name: str, data: bytes | None = None, file: Path | None = None) -> Resource:
    suffix = Path(name).suffix
    return Resource(data=data, file=file, content_type=TYPES.get(suffix, "application/octet-stream"))


class LoopbackServer:
    """Serves ``table`` ({path: Resource}, paths starting with '/') on 127.0.0.1."""

    def __init__(self, table: dict[str, Resource], isolate: bool = True):
        self.table = dict(table)
        self.isolate = isolate
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):     # quiet: the bench prints its own lines
                pass

            def do_HEAD(self):
                self._answer(send_body=False)

            def do_GET(self):
                self._answer(send_body=True)

            def _answer(self, send_body: bool):
                path = self.path.split("?", 1)[0]
                server.requests.append(path)
                res = server.table.get(path)
                if res is None:
                    body, ctype, code = b"not found\n", "text/plain", 404
                else:
                    try:
                        body, ctype, code = res.body(), res.content_type, 200
                    except OSError:
                        body, ctype, code = b"unreadable\n", "text/plain", 500
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                if server.isolate:
                    for k, v in ISOLATION_HEADERS.items():
                        self.send_header(k, v)
                self.end_headers()
                if send_body:
                    self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                       name="edgeforge-web-server", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "LoopbackServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
