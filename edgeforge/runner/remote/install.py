"""Runs on the device (edgeforge.device.provision.setup): check each uploaded wheel's sha256, unpack them
all into a fresh env next to the old one, then swap it in.
Standard library only: sent with ``python -c``."""
from common import sha256_file  # inlined when sent (edgeforge.runner.remote.script)
import json
import os
import shutil
import sys
import zipfile
req = json.loads(sys.argv[1])
base = os.path.abspath(os.path.expanduser(req["workdir"]))
env, new = os.path.join(base, "env"), os.path.join(base, "env.new")
done = {"python": os.path.join(env, "bin", "python"), "site": os.path.join(env, "site-packages")}
try:
    with open(os.path.join(env, "edgeforge-env.json")) as f:
        old = json.load(f)
except (OSError, ValueError):
    old = {}
if old.get("wheels") == req["wheels"] and old.get("python") == req["python"] and os.path.isfile(done["python"]):
    print("@@edgeforge-install " + json.dumps(dict(done, reused=True)))
    sys.exit(0)
shutil.rmtree(new, ignore_errors=True)
site = os.path.join(new, "site-packages")
os.makedirs(site)
os.makedirs(os.path.join(new, "bin"))
for w in req["wheels"]:
    path = os.path.join(base, "wheels", w["remote"])
    if sha256_file(path) != w["sha256"]:
        print("@@edgeforge-install " + json.dumps({"error": "digest mismatch: " + w["remote"]}))
        sys.exit(3)
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            name = info.filename
            parts = name.split("/")
            if parts[0].endswith(".data"):            # purelib/platlib go to site-packages
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                name = "/".join(parts[2:])
            target = os.path.join(site, name)
            if not os.path.realpath(target).startswith(os.path.realpath(site) + os.sep):
                continue
            if name.endswith("/"):
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(target, mode)
wrapper = os.path.join(new, "bin", "python")
with open(wrapper, "w") as f:
    f.write("#!/bin/sh\n# written by edgeforge devices setup\n"
            'export PYTHONPATH="%s${PYTHONPATH:+:$PYTHONPATH}"\nexport EDGEFORGE_ENV="%s"\nexec %s "$@"\n'
            % (os.path.join(env, "site-packages"), os.path.join(env, "bin", "python"), req["python"]))
os.chmod(wrapper, 0o755)
with open(os.path.join(new, "edgeforge-env.json"), "w") as f:
    json.dump({"python": req["python"], "wheels": req["wheels"], "platform": req["platform"]}, f, indent=1)
old = env + ".old"
shutil.rmtree(old, ignore_errors=True)
if os.path.isdir(env):
    os.rename(env, old)
os.rename(new, env)
shutil.rmtree(old, ignore_errors=True)
print("@@edgeforge-install " + json.dumps(done))
