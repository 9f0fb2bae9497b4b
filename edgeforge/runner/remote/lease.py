"""Runs on the device: take, renew, release or show the lease on its work directory
(edgeforge.device.link.lease), under an flock of ``.lease.lock``.
Standard library only: sent with ``python -c``."""
import fcntl
import json
import os
import shutil
import sys
import time
req = json.loads(sys.argv[1])
wd = os.path.abspath(os.path.expanduser(req["workdir"]))
lease = os.path.join(wd, ".lease")
out = {"dir": lease}
def say(**kw):
    out.update(kw)
    print("@@edgeforge-lease " + json.dumps(out))
    sys.exit(0)
try:
    os.makedirs(wd, exist_ok=True)
    lock = os.open(os.path.join(wd, ".lease.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)
except OSError as e:
    say(status="error", error="%s: %s" % (e.strerror, e.filename))
def load(name):
    try:
        with open(os.path.join(lease, name)) as f:
            v = json.load(f)
        return v if isinstance(v, dict) else {}
    except (OSError, ValueError):
        return {}
def write_owner(o):
    tmp = os.path.join(lease, ".owner.json.tmp")
    with open(tmp, "w") as f:
        json.dump(o, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, os.path.join(lease, "owner.json"))
def runner_alive():
    r = load("runner.json")
    pid = r.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if b"edgeforge_runner" not in f.read():
                return None
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return None
    except (OSError, IndexError):
        pass
    return pid
now = time.time()
op = req["op"]
held = os.path.isdir(lease)
owner = load("owner.json") if held else {}
if op == "acquire":
    if held and req.get("break") and owner.get("token") == req["break"] and runner_alive() is None:
        shutil.rmtree(lease, ignore_errors=True)
        out["broke"] = owner
        held = os.path.isdir(lease)
    if held:
        renewed = owner.get("renewed", owner.get("acquired"))
        if not isinstance(renewed, (int, float)):
            try:
                renewed = os.stat(lease).st_mtime
            except OSError:
                renewed = now
        say(status="busy", holder=owner, age_s=now - renewed, runner_pid=runner_alive(), now=now)
    os.mkdir(lease)
    o = dict(req["owner"], acquired=now, renewed=now)
    write_owner(o)
    say(status="acquired", owner=o, now=now)
if op in ("renew", "release"):
    if not held or owner.get("token") != req["token"]:
        say(status="lost", holder=owner, now=now)
    if op == "renew":
        owner["renewed"] = now
        write_owner(owner)
        say(status="renewed", now=now)
    shutil.rmtree(lease, ignore_errors=True)
    say(status="released", now=now)
if op == "show":
    say(status="busy" if held else "free", holder=owner, runner_pid=runner_alive() if held else None, now=now)
say(status="error", error="unknown op %r" % op)
