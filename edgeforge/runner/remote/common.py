"""Shared by the device-side scripts: each is sent alone with ``python -c``, so nothing can be
imported on the device; edgeforge.runner.remote.script inlines this file where a script says
``from common import ...`` (run from this folder, as the tests do, the import itself works)."""
import hashlib


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()
