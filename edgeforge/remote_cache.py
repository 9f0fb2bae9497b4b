"""A remote build cache behind the local one: plain HTTP ``GET``/``PUT``/``HEAD`` on
``<URL>/<key>.tar`` (the entry: its ``artifact/`` and ``entry.json``, a deterministic tar) and
``<URL>/<key>.json`` (its index: the archive's sha256 and size, the pass, the edgeforge version,
and what the pass measured on the host that built it). nginx's dav module, Apache, Artifactory
or an S3 presigned prefix serve it.

Never trusted blindly: the archive's sha256 and size are checked against the index before it is
unpacked, the archive unpacks only regular files below the entry, and the local cache checks
every file's digest after. A mismatch is a miss (one warning line) and the step is built here;
an entry already on the server is never replaced. Never required: a server that is down,
refusing writes, or slower than the timeout is one warning line, and the build goes on locally.
The timeout is a deadline for the whole request (connect, headers and body), and every body has
a cap checked before it is read (the index: 1 MiB; the archive: the size its index states, at
most 2 GiB, and room for it in the cache).
Credentials: ``$EDGEFORGE_REMOTE_CACHE_TOKEN`` (a bearer header) or a netrc; never printed.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import threading
from pathlib import Path, PurePosixPath
from typing import Callable

from . import __version__
from .cache import Cache, entry_json
from .remote_settings import TOKEN_VAR, RemoteSettings, redact, user_config_path

INDEX_SCHEMA = "edgeforge.cache-entry/1"
MAX_ARCHIVE = 2 << 30                   # an index claiming more is foreign
MAX_INDEX = 1 << 20                     # an index is a few hundred bytes; one claiming more is foreign
_KEY = re.compile(r"^[0-9a-f]{64}$")
_SHA = re.compile(r"^[0-9a-f]{64}$")


def say_warning(msg: str, width: int = 80) -> None:
    """``warning: msg`` on stderr, folded at spaces to ``width`` columns (a URL or path longer
    than a line stays whole), continuation lines indented."""
    import textwrap

    from .quiet import TERMINAL     # the terminal, even while a step's native output goes to its log

    print(textwrap.fill(f"warning: {msg}", width=width, subsequent_indent="  ", break_long_words=False,
                        break_on_hyphens=False), file=TERMINAL, flush=True)


def open_cache(plan) -> Cache:
    """The build's cache (``plan``: a ResolvedBuild), with its remote when one is set."""
    cache = Cache(plan.cache_dir, enabled=plan.use_cache)
    settings = RemoteSettings.resolve(getattr(plan, "remote_cache", None),
                                      getattr(plan, "remote_cache_mode", None),
                                      getattr(plan, "remote_timeout", None))
    if settings is not None and cache.enabled:
        cache.remote = Remote(settings)
    return cache


class Unusable(Exception):
    """The remote cannot serve this build (``down``: unreachable or slow; else it refused):
    said once, then off (a refused upload leaves reading on)."""

    def __init__(self, why: str, down: bool = False):
        super().__init__(why)
        self.down = down


class Remote:
    """One build's view of the remote. ``warn`` prints one line (default: stderr)."""

    def __init__(self, settings: RemoteSettings, warn: Callable[[str], None] | None = None):
        self.settings = settings
        self.where = redact(settings.url).split("://", 1)[-1]
        self.warn = warn or say_warning
        self.readable = True
        self.writable = settings.mode == "readwrite"
        self._token = os.environ.get(TOKEN_VAR) or None
        self._session = None

    # ------------------------------------------------------------------ HTTP

    def _http(self):
        if self._session is None:
            import requests

            self._session = requests.Session()
            if self._token:           # else requests reads ~/.netrc for the host
                token = self._token

                def bearer(r):        # as auth, so that a netrc entry does not replace it
                    r.headers["Authorization"] = f"Bearer {token}"
                    return r
                self._session.auth = bearer
            self._session.headers["User-Agent"] = f"edgeforge/{__version__}"
        return self._session

    def _clean(self, text: str) -> str:
        text = text.replace(self.settings.url, self.where)
        if self._token:
            text = text.replace(self._token, "<token>")
        return re.sub(r"//[^/@\s]+@", "//", text)

    def _request(self, method: str, name: str, sink: Callable[[bytes], None] | None = None,
                 cap: int = 0, **kw) -> tuple[int, str]:
        """One request, its body included, within ``timeout_s`` from the first byte sent to the
        last received (a deadline, not an idle timeout: a server sending a byte a second trips
        it): (HTTP status, why the body was not taken, or ""). A 200's body goes to ``sink``
        when given, at most ``cap`` bytes: a Content-Length above it is refused before reading.
        Past the deadline, or no connection: :class:`Unusable` (down)."""
        t = self.settings.timeout_s
        job = _Exchange(self._http(), method, f"{self.settings.url}/{name}", t, kw, sink, cap)
        if not job.done.wait(t):
            job.abandon()
            self._session = None            # the worker may still hold it
            raise Unusable(f"{'no answer' if job.status is None else 'not all of it'} within {t:g} s",
                           down=True)
        if job.error is not None:
            raise job.error
        return job.status, job.problem

    def _off(self, what: str, why: str) -> None:
        self.readable = self.writable = False
        self.warn(f"remote cache {self.where} {what} ({self._clean(why)}): building locally")

    # ------------------------------------------------------------------ read

    def fetch(self, key: str, cache: Cache, pass_name: str):
        """The entry for ``key`` copied into ``cache`` and checked there, or None (a miss)."""
        if not self.readable or not _KEY.match(key):
            return None
        try:
            hit = self._fetch(key, cache, pass_name)
        except Unusable as exc:
            self._off("not reachable" if exc.down else "refused", str(exc))
            return None
        except OSError as exc:              # the local side: a full disk while unpacking
            self.warn(f"remote cache: cannot store {pass_name}'s entry here ({exc.strerror or exc})")
            return None
        cache.count_event("remote_hits" if hit else "remote_misses")
        return hit

    def _fetch(self, key: str, cache: Cache, pass_name: str):
        raw = io.BytesIO()
        status, problem = self._request("GET", f"{key}.json", sink=raw.write, cap=MAX_INDEX)
        if status == 404:
            return None
        if status in (401, 403):
            raise Unusable(f"HTTP {status}: not allowed to read")
        if status != 200:
            raise Unusable(f"HTTP {status} for an index")
        if problem:
            return self._bad(key, pass_name, f"its index {problem}")
        index = self._index(raw.getvalue(), key, pass_name)
        if isinstance(index, str):
            return self._bad(key, pass_name, index)
        size = index["archive"]["size"]
        free = _free_bytes(cache.root)
        if free is not None and free < 2 * size + (64 << 20):
            return self._bad(key, pass_name, f"no room here for its {size} bytes (and unpacked)")
        tmp = cache.staging(key)
        try:
            why = self._archive(key, index, tmp, pass_name)
            measured = index.get("measured") or []
            if measured and not why:
                (tmp / "measured.json").write_text(json.dumps(measured, sort_keys=True))
        except BaseException:
            _rmtree(tmp)
            raise
        if why:
            _rmtree(tmp)
            return self._bad(key, pass_name, why)
        cache.adopt(key, tmp)
        hit = cache.get(key)                # every file's digest, as for a local entry
        if hit is None:
            return self._bad(key, pass_name, "its files do not match their digests")
        cache.count_event("bytes_downloaded", size + len(raw.getvalue()))
        return hit

    def _archive(self, key: str, index: dict, tmp: Path, pass_name: str) -> str:
        """Download the archive into an unnamed file beside ``tmp`` and unpack it into ``tmp``:
        "" when done, else why not (a mismatch with the index, a refused member)."""
        import tempfile

        size, digest = index["archive"]["size"], hashlib.sha256()
        with tempfile.TemporaryFile(dir=tmp.parent, prefix=".download-") as fh:
            def sink(chunk: bytes) -> None:
                digest.update(chunk)
                fh.write(chunk)
            status, problem = self._request("GET", f"{key}.tar", sink=sink, cap=size)
            if status != 200:
                return f"its archive is missing (HTTP {status})"
            if problem:
                return f"its archive {problem}"
            if fh.tell() != size:
                return f"its archive is truncated ({fh.tell()} of {size} bytes)"
            if digest.hexdigest() != index["archive"]["sha256"]:
                return "its archive does not match its index (sha256)"
            fh.seek(0)
            return unpack(fh, tmp, pass_name)

    def _index(self, raw: bytes, key: str, pass_name: str):
        try:
            index = json.loads(raw)
        except (ValueError, RecursionError):
            return "its index is not JSON"
        if not isinstance(index, dict) or index.get("schema") != INDEX_SCHEMA or index.get("key") != key:
            return "its index is not an edgeforge cache entry for this key"
        arc = index.get("archive")
        if not (isinstance(arc, dict) and isinstance(arc.get("sha256"), str) and _SHA.match(arc["sha256"])
                and type(arc.get("size")) is int and 0 < arc["size"]):
            return "its index names no archive"
        if arc["size"] > MAX_ARCHIVE:
            return f"its index claims a {arc['size']}-byte archive (more than {MAX_ARCHIVE >> 30} GiB)"
        if index.get("pass") != pass_name:
            return f"its index is for another pass ({str(index.get('pass'))[:40]})"
        if not isinstance(index.get("measured", []), list):
            return "its index's measurements are not a list"
        return index

    def _bad(self, key: str, pass_name: str, why: str):
        self.warn(f"remote cache: {pass_name} entry {key[:12]}: {why}: building it locally")
        return None

    # ------------------------------------------------------------------ write

    def publish(self, key: str, cache: Cache, pass_name: str, measured: list) -> None:
        """Upload the local entry for ``key`` unless the server has one (HEAD first, PUT with
        ``If-None-Match: *``); never raises."""
        if not self.writable or not _KEY.match(key):
            return
        try:
            self._publish(key, cache, pass_name, measured)
        except Unusable as exc:
            if exc.down:
                if self.readable or self.writable:
                    self._off("not reachable", str(exc))
            elif self.writable:
                self.writable = False
                self.warn(f"remote cache {self.where} refused an upload ({self._clean(str(exc))}): "
                          "not uploading")
        except OSError as exc:
            self.warn(f"remote cache: cannot pack {pass_name}'s entry ({exc.strerror or exc})")

    def _publish(self, key: str, cache: Cache, pass_name: str, measured: list) -> None:
        status, _ = self._request("HEAD", f"{key}.json")
        if status == 200:
            return                                  # a good entry stays as it is
        if status in (401, 403):
            raise Unusable(f"HTTP {status}: not allowed")
        body = pack(cache.entry(key))
        if body is None:
            return
        index = {"schema": INDEX_SCHEMA, "key": key, "pass": pass_name, "edgeforge_version": __version__,
                 "archive": {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body)},
                 "measured": measured or []}
        raw = json.dumps(index, sort_keys=True).encode()
        for name, data in ((f"{key}.tar", body), (f"{key}.json", raw)):
            status, _ = self._request("PUT", name, data=data, headers={"If-None-Match": "*"})
            if status == 412:                       # another runner stored it first
                return
            if status not in (200, 201, 204):
                raise Unusable(f"HTTP {status} for an upload")
        cache.count_event("uploads")
        cache.count_event("bytes_uploaded", len(body) + len(raw))


class _Exchange:
    """One HTTP request and its body, in a daemon thread, so that the caller can stop waiting
    at a deadline whatever the socket does (requests' own timeouts are per read). ``done`` is
    set when it ends; then ``status`` (None: no answer), ``problem`` and ``error`` say how."""

    def __init__(self, session, method: str, url: str, timeout_s: float, kw: dict,
                 sink: Callable[[bytes], None] | None, cap: int):
        self.session, self.method, self.url, self.t, self.kw = session, method, url, timeout_s, kw
        self.sink, self.cap = sink, cap
        self.status: int | None = None
        self.problem = ""
        self.error: Exception | None = None
        self.response = None
        self.done, self.cancelled = threading.Event(), threading.Event()
        threading.Thread(target=self._run, name="edgeforge-remote-cache", daemon=True).start()

    def _run(self) -> None:
        import requests

        try:
            self._exchange()
        except requests.Timeout:
            self.error = Unusable(f"no answer within {self.t:g} s", down=True)
        except requests.ConnectionError as exc:
            if self.status is not None:             # cut mid-body
                self.problem = "was cut off"
            else:
                refused = "refused" in str(exc).lower()
                self.error = Unusable("connection refused" if refused else "cannot connect", down=True)
        except requests.RequestException as exc:
            if self.status is not None:             # a broken chunk, a bad encoding
                self.problem = "was cut off"
            else:
                self.error = Unusable(type(exc).__name__, down=True)
        except (ValueError, OSError) as exc:       # the sink's file closed by an abandon
            if not self.cancelled.is_set():
                self.error = Unusable(type(exc).__name__, down=True)
        finally:
            self.done.set()

    def _exchange(self) -> None:
        r = self.session.request(self.method, self.url, timeout=(self.t, self.t), allow_redirects=False,
                                 stream=True, **self.kw)
        self.response = r
        with r:
            self.status = r.status_code
            if self.sink is None or r.status_code != 200:
                return
            claimed = r.headers.get("Content-Length", "")
            if claimed and (not claimed.isdigit() or int(claimed) > self.cap):
                self.problem = f"claims {claimed[:20]} bytes (at most {self.cap} taken)"
                return
            got = 0
            for chunk in r.iter_content(1 << 16):
                if self.cancelled.is_set():
                    return
                got += len(chunk)
                if got > self.cap:
                    self.problem = f"is longer than {self.cap} bytes"
                    return
                self.sink(chunk)

    def abandon(self) -> None:
        """Past the deadline: stop taking the body and close the socket under the worker."""
        import socket

        self.cancelled.set()
        conn = getattr(self.response, "raw", None)
        sock = getattr(getattr(conn, "connection", None), "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _free_bytes(path: Path) -> int | None:
    import shutil

    for p in (path, *path.parents):
        if p.exists():
            try:
                return shutil.disk_usage(p).free
            except OSError:
                return None
    return None


def pack(entry: Path) -> bytes | None:
    """The entry's ``entry.json`` and ``artifact/`` as a tar with no times, owners or modes
    of this host: the same bytes for the same entry everywhere. None if it is not whole."""
    meta_file, art = entry / "entry.json", entry / "artifact"
    if not (meta_file.is_file() and art.is_dir()):
        return None
    meta = json.loads(meta_file.read_text())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(name: str, data: bytes | None) -> None:
            info = tarfile.TarInfo(name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        add("entry.json", entry_json(meta).encode())
        add("artifact", None)
        for p in sorted(art.rglob("*"), key=lambda q: q.relative_to(art).as_posix()):
            name = "artifact/" + p.relative_to(art).as_posix()
            if p.is_symlink():
                return None
            add(name, None if p.is_dir() else p.read_bytes())
    return buf.getvalue()


def unpack(body, dest: Path, pass_name: str) -> str:
    """Unpack an entry archive (bytes, or a file open for reading) into ``dest``: regular files
    and directories only, each below ``artifact/`` or ``entry.json``; "" when done, else why it
    was refused."""
    import shutil

    try:
        with tarfile.open(fileobj=io.BytesIO(body) if isinstance(body, bytes) else body, mode="r:") as tar:
            members = tar.getmembers()
            for m in members:
                parts = PurePosixPath(m.name).parts
                if m.name.startswith("/") or not parts or ".." in parts or "\\" in m.name \
                        or not (m.isfile() or m.isdir()) or not (
                            parts[0] == "artifact" or (m.name == "entry.json" and m.isfile())):
                    return f"its archive holds a member it may not ({m.name[:60]!r})"
            for m in members:
                target = dest.joinpath(*PurePosixPath(m.name).parts)
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                with open(target, "wb") as fh:
                    if src is not None:
                        shutil.copyfileobj(src, fh)
    except (tarfile.TarError, EOFError):
        return "its archive is not a tar"
    except OSError as exc:                  # two members at one path, a name too long ...
        return f"its archive does not unpack ({exc.strerror or type(exc).__name__})"
    try:
        meta = json.loads((dest / "entry.json").read_text())
    except (OSError, ValueError):
        return "its archive has no entry.json"
    if not isinstance(meta, dict) or meta.get("pass") != pass_name or not (dest / "artifact").is_dir():
        return "its archive is another pass's entry"
    return ""


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def stats_lines(cache: Cache) -> list[str]:
    """``edgeforge cache stats``: what the counters in the local cache say."""
    def nbytes(n: int) -> str:
        for unit in ("B", "KiB", "MiB", "GiB"):
            if n < 1024 or unit == "GiB":
                return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
            n /= 1024
        return str(n)

    s = cache.stats()
    g = s.get
    return [f"{cache.root}: {cache.count()} entries",
            f"local:  {g('local_hits', 0)} hits, {g('misses', 0)} misses (built here)",
            f"remote: {g('remote_hits', 0)} hits, {g('remote_misses', 0)} misses, "
            f"{g('uploads', 0)} uploads",
            f"moved:  {nbytes(g('bytes_downloaded', 0))} down, "
            f"{nbytes(g('bytes_uploaded', 0))} up"]


__all__ = ["RemoteSettings", "Remote", "open_cache", "pack", "unpack", "redact", "user_config_path",
           "stats_lines"]
