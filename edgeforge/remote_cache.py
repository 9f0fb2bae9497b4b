"""A remote build cache behind the local one: plain HTTP ``GET``/``PUT``/``HEAD`` on
``<URL>/<key>.tar`` (the entry: its ``artifact/`` and ``entry.json``, a deterministic tar) and
``<URL>/<key>.json`` (its index: the archive's sha256 and size, the pass, the edgeforge version,
and what the pass measured on the host that built it). nginx's dav module, Apache, Artifactory
or an S3 presigned prefix serve it.

Never trusted blindly: the archive's sha256 and size are checked against the index before it is
unpacked, the archive unpacks only regular files below the entry, and the local cache checks
every file's digest after. A mismatch is a miss (one warning line) and the step is built here;
an entry already on the server is never replaced. Never required: a server that is down, slower
than the timeout or refusing writes is one warning line, and the build goes on locally.
Credentials: ``$EDGEFORGE_REMOTE_CACHE_TOKEN`` (a bearer header) or a netrc; never printed.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Optional
from urllib.parse import urlsplit, urlunsplit

from . import __version__
from .cache import Cache, entry_json
from .config import read_toml
from .errors import ConfigError

INDEX_SCHEMA = "edgeforge.cache-entry/1"
MODES = ("readwrite", "read", "off")
DEFAULT_TIMEOUT_S = 10.0
MAX_ARCHIVE = 16 << 30                  # an index claiming more is foreign
URL_VAR, MODE_VAR, TOKEN_VAR = "EDGEFORGE_REMOTE_CACHE", "EDGEFORGE_REMOTE_CACHE_MODE", "EDGEFORGE_REMOTE_CACHE_TOKEN"
_KEY = re.compile(r"^[0-9a-f]{64}$")
_SHA = re.compile(r"^[0-9a-f]{64}$")


def user_config_path() -> Path:
    """``$EDGEFORGE_CONFIG``, else ``$XDG_CONFIG_HOME/edgeforge/config.toml`` (``~/.config``)."""
    env = os.environ.get("EDGEFORGE_CONFIG")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "edgeforge" / "config.toml"


def redact(url: str) -> str:
    """``url`` without its user:password part (for messages)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<remote cache>"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def say_warning(msg: str, width: int = 80) -> None:
    """``warning: msg`` on stderr, folded at spaces to ``width`` columns (a URL or path longer
    than a line stays whole), continuation lines indented."""
    import textwrap

    from .quiet import TERMINAL     # the terminal, even while a step's native output goes to its log

    print(textwrap.fill(f"warning: {msg}", width=width, subsequent_indent="  ", break_long_words=False,
                        break_on_hyphens=False), file=TERMINAL, flush=True)


@dataclass(frozen=True)
class RemoteSettings:
    url: str
    mode: str = "readwrite"
    timeout_s: float = DEFAULT_TIMEOUT_S

    def where(self) -> str:
        return f"{redact(self.url)} ({self.mode}, {self.timeout_s:g} s a request)"

    @classmethod
    def resolve(cls, url: Optional[str] = None, mode: Optional[str] = None,
                timeout_s: Optional[float] = None) -> "RemoteSettings | None":
        """The flags, else ``$EDGEFORGE_REMOTE_CACHE`` / ``$EDGEFORGE_REMOTE_CACHE_MODE``, else
        ``[cache] remote``/``mode``/``timeout`` in :func:`user_config_path`. None: no remote."""
        file: dict = {}
        path = user_config_path()
        if path.is_file() and (url is None or mode is None or timeout_s is None):
            section = read_toml(path, "edgeforge user config").get("cache", {})
            if not isinstance(section, dict):
                raise ConfigError(f"edgeforge user config {path}: [cache] is not a table")
            file = section
        url = url if url is not None else (os.environ.get(URL_VAR) or file.get("remote"))
        mode = mode or os.environ.get(MODE_VAR) or file.get("mode") or "readwrite"
        timeout_s = timeout_s if timeout_s is not None else file.get("timeout", DEFAULT_TIMEOUT_S)
        if mode not in MODES:
            raise ConfigError(f"remote cache mode {mode!r}: not one of {', '.join(MODES)}",
                              hint=f"--remote-cache-mode, ${MODE_VAR} or [cache] mode in {path}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
                or not (0 < float(timeout_s) <= 3600):
            raise ConfigError(f"remote cache timeout {timeout_s!r}: not a number of seconds "
                              "from 0 to 3600", hint=f"--remote-timeout or [cache] timeout in {path}")
        if not url or mode == "off":
            return None
        if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https") \
                or not urlsplit(url).hostname:
            raise ConfigError(f"remote cache {redact(str(url))!r}: not an http:// or https:// URL",
                              hint=f"--remote-cache, ${URL_VAR} or [cache] remote in {path}")
        return cls(url.rstrip("/"), mode, float(timeout_s))


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

    def _request(self, method: str, name: str, **kw):
        import requests

        url = f"{self.settings.url}/{name}"
        t = self.settings.timeout_s
        try:
            return self._http().request(method, url, timeout=(t, t), allow_redirects=False, **kw)
        except requests.Timeout:
            raise Unusable(f"no answer within {t:g} s", down=True) from None
        except requests.ConnectionError as exc:
            reason = "connection refused" if "refused" in str(exc).lower() else "cannot connect"
            raise Unusable(reason, down=True) from None
        except requests.RequestException as exc:
            raise Unusable(type(exc).__name__, down=True) from None

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
        r = self._request("GET", f"{key}.json")
        if r.status_code == 404:
            return None
        if r.status_code in (401, 403):
            raise Unusable(f"HTTP {r.status_code}: not allowed to read")
        if r.status_code != 200:
            raise Unusable(f"HTTP {r.status_code} for an index")
        index = self._index(r.content, key, pass_name)
        if isinstance(index, str):
            return self._bad(key, pass_name, index)
        body, why = self._download(f"{key}.tar", index["archive"]["size"])
        if body is None:
            return self._bad(key, pass_name, why)
        digest = hashlib.sha256(body).hexdigest()
        if digest != index["archive"]["sha256"]:
            return self._bad(key, pass_name, "its archive does not match its index (sha256)")
        tmp = cache.staging(key)
        try:
            why = unpack(body, tmp, pass_name)
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
        cache.count_event("bytes_downloaded", len(body) + len(r.content))
        return hit

    def _index(self, raw: bytes, key: str, pass_name: str):
        try:
            index = json.loads(raw)
        except ValueError:
            return "its index is not JSON"
        if not isinstance(index, dict) or index.get("schema") != INDEX_SCHEMA or index.get("key") != key:
            return "its index is not an edgeforge cache entry for this key"
        arc = index.get("archive")
        if not (isinstance(arc, dict) and isinstance(arc.get("sha256"), str) and _SHA.match(arc["sha256"])
                and isinstance(arc.get("size"), int) and 0 < arc["size"] <= MAX_ARCHIVE):
            return "its index names no archive"
        if index.get("pass") != pass_name:
            return f"its index is for another pass ({str(index.get('pass'))[:40]})"
        if not isinstance(index.get("measured", []), list):
            return "its index's measurements are not a list"
        return index

    def _download(self, name: str, size: int):
        import requests

        r = self._request("GET", name, stream=True)
        with r:
            if r.status_code != 200:
                return None, f"its archive is missing (HTTP {r.status_code})"
            buf, deadline = io.BytesIO(), time.monotonic() + max(30.0, 3 * self.settings.timeout_s)
            try:
                for chunk in r.iter_content(1 << 20):
                    buf.write(chunk)
                    if buf.tell() > size:
                        return None, "its archive is longer than its index says"
                    if time.monotonic() > deadline:
                        raise Unusable("the download is too slow", down=True)
            except requests.RequestException as exc:    # cut mid-body, or stalled
                if isinstance(exc, requests.Timeout) or "timed out" in str(exc).lower():
                    raise Unusable(f"no data within {self.settings.timeout_s:g} s", down=True) from None
                return None, "its archive was cut off"
        if buf.tell() != size:
            return None, f"its archive is truncated ({buf.tell()} of {size} bytes)"
        return buf.getvalue(), ""

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
        r = self._request("HEAD", f"{key}.json")
        if r.status_code == 200:
            return                                  # a good entry stays as it is
        if r.status_code in (401, 403):
            raise Unusable(f"HTTP {r.status_code}: not allowed")
        body = pack(cache.entry(key))
        if body is None:
            return
        index = {"schema": INDEX_SCHEMA, "key": key, "pass": pass_name, "edgeforge_version": __version__,
                 "archive": {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body)},
                 "measured": measured or []}
        raw = json.dumps(index, sort_keys=True).encode()
        for name, data in ((f"{key}.tar", body), (f"{key}.json", raw)):
            r = self._request("PUT", name, data=data, headers={"If-None-Match": "*"})
            if r.status_code == 412:                # another runner stored it first
                return
            if r.status_code not in (200, 201, 204):
                raise Unusable(f"HTTP {r.status_code} for an upload")
        cache.count_event("uploads")
        cache.count_event("bytes_uploaded", len(body) + len(raw))


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


def unpack(body: bytes, dest: Path, pass_name: str) -> str:
    """Unpack an entry archive into ``dest``: regular files and directories only, each below
    ``artifact/`` or ``entry.json``; "" when done, else why it was refused."""
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
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
                    fh.write(src.read() if src is not None else b"")
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
