"""Where the remote build cache is and how long a request to it may take: the flags, else the
environment, else the user config file (``[cache]``). The user config is read through a strict
model, as edgeforge.toml is: an unknown table or key is exit 2 naming the closest valid one; a
URL that cannot be asked (no scheme or host, a port out of range, a broken IPv6 literal) is
exit 2 naming the flag, the variable or the file it came from."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Optional
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field

from .config import Strict, parse_model, read_toml
from .errors import ConfigError

MODES = ("readwrite", "read", "off")
DEFAULT_TIMEOUT_S = 10.0
URL_VAR, MODE_VAR, TOKEN_VAR = "EDGEFORGE_REMOTE_CACHE", "EDGEFORGE_REMOTE_CACHE_MODE", "EDGEFORGE_REMOTE_CACHE_TOKEN"


class UserCache(Strict):
    """``[cache]`` in the user config."""

    remote: Optional[Annotated[str, Field(min_length=1, max_length=2048)]] = None
    mode: Optional[Literal["readwrite", "read", "off"]] = None
    timeout: Optional[Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)]] = None


class UserConfig(Strict):
    """The user config file: one table today, ``[cache]``."""

    cache: UserCache = UserCache()


def user_config_path() -> Path:
    """``$EDGEFORGE_CONFIG``, else ``$XDG_CONFIG_HOME/edgeforge/config.toml`` (``~/.config``)."""
    env = os.environ.get("EDGEFORGE_CONFIG")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "edgeforge" / "config.toml"


def read_user_config(path: Path | None = None) -> UserConfig:
    """The user config (defaults when there is no file); ConfigError naming the file and key."""
    path = path or user_config_path()
    if not path.is_file():
        if path.exists():
            raise ConfigError(f"edgeforge user config {path}: not a file")
        return UserConfig()
    return parse_model(UserConfig, read_toml(path, "edgeforge user config"), f"edgeforge user config {path}")


def redact(url: str) -> str:
    """``url`` without its user:password part (for messages); never raises."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<remote cache>"
    if ":" in host:
        host = f"[{host}]"
    if port:
        host = f"{host}:{port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def check_url(url: object, source: str) -> str:
    """``url`` if a request can be made to it, else ConfigError naming ``source``."""
    why = ""
    if not isinstance(url, str):
        why = "not a string"
    else:
        try:
            parts = urlsplit(url)
            parts.port                        # noqa: B018  (raises on a port out of range)
        except ValueError as exc:
            why = str(exc).rstrip(".")
        else:
            if parts.scheme not in ("http", "https"):
                why = "not an http:// or https:// URL"
            elif not parts.hostname:
                why = "no host"
            elif any(c.isspace() or ord(c) < 32 for c in url):
                why = "holds a space or a control character"
    if why:
        shown = redact(url) if isinstance(url, str) else repr(url)
        shown = shown if shown != "<remote cache>" else url.split("@")[-1][:80]
        raise ConfigError(f"{source}: remote cache URL {shown!r}: {why}",
                          hint="e.g. https://cache.example/edgeforge (docs/cache.md)")
    return url


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
        path = user_config_path()
        file = read_user_config(path).cache
        url_from = "--remote-cache"
        if url is None:
            url, url_from = os.environ.get(URL_VAR) or None, f"${URL_VAR}"
        if url is None and file.remote is not None:
            url, url_from = file.remote, f"edgeforge user config {path}: [cache] remote"
        mode = mode or os.environ.get(MODE_VAR) or file.mode or "readwrite"
        if mode not in MODES:
            raise ConfigError(f"remote cache mode {mode!r}: not one of {', '.join(MODES)}",
                              hint=f"--remote-cache-mode, ${MODE_VAR} or [cache] mode in {path}")
        timeout_s = timeout_s if timeout_s is not None else (file.timeout or DEFAULT_TIMEOUT_S)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
                or not (0 < float(timeout_s) <= 3600):
            raise ConfigError(f"remote cache timeout {timeout_s!r}: not a number of seconds "
                              "from 0 to 3600", hint=f"--remote-timeout or [cache] timeout in {path}")
        if not url or mode == "off":
            return None
        return cls(check_url(url, url_from).rstrip("/"), mode, float(timeout_s))


__all__ = ["RemoteSettings", "UserConfig", "read_user_config", "user_config_path", "redact", "check_url",
           "MODES", "DEFAULT_TIMEOUT_S", "URL_VAR", "MODE_VAR", "TOKEN_VAR"]
