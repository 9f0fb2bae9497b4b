"""The web toolchain: onnxruntime-web from the npm registry, pinned and checked by digest.

``edgeforge toolchain install web`` runs ``npm pack onnxruntime-web@VERSION`` (the registry's
tarball, nothing installed and no install scripts run), checks the tarball's sha512 against the
integrity pinned here (the registry's ``dist.integrity``), and unpacks only the files a page
needs, the wasm build with SIMD and threads, into ``<toolchains>/web/onnxruntime-web-VERSION/``.
``toolchain.json`` is written last, with each file's sha256: a half-finished install does not
count, and :func:`find_web` checks every file again before a bench serves it.
"""
from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .errors import ConfigError
from .fsutil import writable_dir, write_json_atomic
from .toolchain import toolchains_choice

SCHEMA = "edgeforge.toolchain-web/1"
PACKAGE = "onnxruntime-web"
VERSION = "1.31.1"
# npm's dist.integrity of onnxruntime-web-1.31.1.tgz (34,586,352 bytes)
INTEGRITY = "sha512-5GeH+bWQ+HxM10z7erGlsWqryrwMbSvm/1tkIsKTT48g0fI19VXVVC435t4t7VsPdSQeS7NmuZPXrQ73k82URw=="
# the ES module of the wasm-only build, and the SIMD + threads wasm binary it loads
FILES = ("dist/ort.wasm.min.mjs", "dist/ort-wasm-simd-threaded.mjs", "dist/ort-wasm-simd-threaded.wasm")
ENTRY = "ort.wasm.min.mjs"
INSTALL_HINT = "install it with `edgeforge toolchain install web` (needs npm: apt-get install npm)"
NPM_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class WebToolchain:
    root: Path                   # the directory holding FILES' basenames
    version: str
    integrity: str
    files: dict                  # basename -> sha256

    def path(self, name: str) -> Path:
        return self.root / name


def web_dir() -> Path:
    return toolchains_choice()[0] / "web"


def package_dir(version: str = VERSION) -> Path:
    return web_dir() / f"{PACKAGE}-{version}"


def sha512_integrity(path: Path) -> str:
    h = hashlib.sha512()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha512-" + base64.b64encode(h.digest()).decode()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(root: Path | None = None) -> dict | None:
    root = root or package_dir()
    try:
        data = json.loads((root / "toolchain.json").read_text())
    except (OSError, ValueError):
        return None
    ok = (isinstance(data, dict) and data.get("schema") == SCHEMA and data.get("version") == VERSION
          and data.get("integrity") == INTEGRITY and isinstance(data.get("files"), dict)
          and sorted(data["files"]) == sorted(Path(f).name for f in FILES))
    return data if ok else None


def find_web(check: bool = False) -> WebToolchain | None:
    """The installed onnxruntime-web, or None. ``check``: every file's sha256 against the
    manifest (a changed file: ConfigError naming it)."""
    root = package_dir()
    man = read_manifest(root)
    if man is None:
        return None
    tc = WebToolchain(root, man["version"], man["integrity"], dict(man["files"]))
    if check:
        for name, digest in tc.files.items():
            p = root / name
            if not p.is_file() or _sha256(p) != digest:
                raise ConfigError(f"{p}: not the file `toolchain install web` checked in (sha256 differs)",
                                  hint="reinstall it: edgeforge toolchain install web")
    return tc


def require_web() -> WebToolchain:
    tc = find_web(check=True)
    if tc is None:
        raise ConfigError(f"a browser bench needs {PACKAGE} {VERSION}, which is not installed", hint=INSTALL_HINT)
    return tc


def install_web(log: Callable[[str], None] = lambda m: None, npm: str | None = None) -> dict:
    """``npm pack`` the pinned onnxruntime-web, check its integrity, unpack the wasm files;
    return the manifest. ConfigError (exit 2) when npm is missing, fails or the digest differs."""
    where, chosen_by = toolchains_choice()
    writable_dir(where, chosen_by, what="toolchains directory", create=True)
    npm = npm or shutil.which("npm")
    if not npm:
        raise ConfigError("`toolchain install web` needs npm, which is not on PATH",
                          hint="install it: apt-get install npm (Debian 12 has it)")
    root = package_dir()
    web_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".install-", dir=web_dir()) as tmp:
        tmp_path = Path(tmp)
        log(f"npm pack {PACKAGE}@{VERSION}")
        try:
            res = subprocess.run([npm, "pack", f"{PACKAGE}@{VERSION}", "--json", "--silent",
                                  "--pack-destination", str(tmp_path)], cwd=tmp_path, capture_output=True,
                                 text=True, timeout=NPM_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"npm pack {PACKAGE}@{VERSION} did not finish in {NPM_TIMEOUT_S:g}s") from None
        except OSError as exc:
            raise ConfigError(f"npm could not be run ({exc.strerror or exc})") from None
        tarballs = sorted(tmp_path.glob("*.tgz"))
        if res.returncode != 0 or len(tarballs) != 1:
            tail = " | ".join((res.stderr or res.stdout or "").strip().splitlines()[-2:])[:300]
            raise ConfigError(f"npm pack {PACKAGE}@{VERSION} failed (exit {res.returncode}): {tail or 'no message'}")
        got = sha512_integrity(tarballs[0])
        if got != INTEGRITY:
            raise ConfigError(f"{tarballs[0].name}: sha512 {got[:24]}… is not the pinned {INTEGRITY[:24]}…",
                              hint="the registry served another tarball; nothing was installed")
        staged = tmp_path / "files"
        staged.mkdir()
        _extract(tarballs[0], staged)
        files = {Path(f).name: _sha256(staged / Path(f).name) for f in FILES}
        if root.exists():
            log(f"removing the previous toolchain at {root}")
            shutil.rmtree(root)
        staged.rename(root)
    manifest = {"schema": SCHEMA, "name": "web", "package": PACKAGE, "version": VERSION, "integrity": INTEGRITY,
                "files": files, "entry": ENTRY,
                "installed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    write_json_atomic(root / "toolchain.json", manifest)
    return manifest


def _extract(tgz: Path, dest: Path) -> None:
    """Only FILES, as plain files under ``dest`` by basename (no paths from the archive used)."""
    wanted = {f"package/{f}": Path(f).name for f in FILES}
    found = set()
    with tarfile.open(tgz, "r:gz") as tar:
        for member in tar:
            name = wanted.get(member.name)
            if name is None or not member.isfile():
                continue
            src = tar.extractfile(member)
            if src is None:
                continue
            with src, open(dest / name, "wb") as out:
                shutil.copyfileobj(src, out)
            found.add(member.name)
    missing = sorted(set(wanted) - found)
    if missing:
        raise ConfigError(f"{tgz.name} lacks {', '.join(missing)}")


def list_row() -> dict:
    """``toolchain list``'s row for the web toolchain."""
    tc = find_web()
    man = read_manifest() if tc else None
    return {"name": "web", "installed": tc is not None, "source": "managed" if tc else None,
            "package": PACKAGE, "version": tc.version if tc else None, "pinned": VERSION,
            "integrity": INTEGRITY, "path": str(tc.root if tc else package_dir()),
            "installed_at": man.get("installed_at") if man else None}
