"""Runs on the device before anything is uploaded (edgeforge.device.measure.bench): the python, the
modules found, the work directory made, the sha256 of the files already there, cores and memory.
Files named in ``shared`` ({path: sha256}) are also kept by digest in ``<workdir>/.blobs/``: one
missing here but held there is linked in (not uploaded again), and one held here goes there.
Standard library only: sent with ``python -c``."""
from common import sha256_file  # inlined when sent (edgeforge.runner.remote.script)
import importlib.util
import json
import os
import platform
import sys
req = json.loads(sys.argv[1])
out = {"python": platform.python_version(), "executable": sys.executable,
       "machine": platform.machine(), "modules": {}, "digests": {}}
for m in req["modules"]:
    try:
        out["modules"][m] = importlib.util.find_spec(m) is not None
    except Exception:  # noqa: BLE001 - find_spec imports the parent package, which may raise anything
        out["modules"][m] = False
d = os.path.abspath(os.path.join(os.path.expanduser(req["workdir"]), req["subdir"]))
out["dir"] = d
try:
    for sub in [""] + req["mkdirs"]:
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    out["writable"] = os.access(d, os.W_OK)
except OSError as e:
    out["writable"] = False
    out["error"] = "%s: %s" % (e.strerror, e.filename)
for rel in req["files"]:
    try:
        out["digests"][rel] = sha256_file(os.path.join(d, rel))
    except OSError:
        out["digests"][rel] = None
blobs = os.path.join(os.path.abspath(os.path.expanduser(req["workdir"])), ".blobs")
out["linked"] = []
for rel, want in sorted(req.get("shared", {}).items()):
    if len(want) != 64 or not all(c in "0123456789abcdef" for c in want):
        continue
    here, blob = os.path.join(d, rel), os.path.join(blobs, want)
    try:
        os.makedirs(blobs, exist_ok=True)
        if out["digests"].get(rel) == want:
            if not os.path.isfile(blob):
                os.link(here, blob)
        elif os.path.isfile(blob):
            if sha256_file(blob) != want:       # changed in place (a hard link shares it): drop it
                os.remove(blob)
                continue
            tmp = here + ".link-%d" % os.getpid()
            os.link(blob, tmp)
            os.replace(tmp, here)
            out["digests"][rel] = want
            out["linked"].append(rel)
    except OSError:
        pass        # no store here (another file system, read-only): the file is uploaded
out["cores"] = os.cpu_count()      # what a load may start there (edgeforge.device.measure.load)
try:
    with open("/proc/meminfo") as f:
        mem = dict((ln.split(":")[0], int(ln.split()[1]) // 1024) for ln in f if ln.split()[1:2] and ln.split()[1].isdigit())
    out["mem_total_mb"], out["mem_available_mb"] = mem.get("MemTotal"), mem.get("MemAvailable")
except (OSError, ValueError, IndexError):
    pass
print("@@edgeforge-prepare " + json.dumps(out))
