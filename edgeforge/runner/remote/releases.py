"""Runs on the device: the releases of one deployed name (edgeforge.device.release.releases): list,
begin, seal, switch, prune and remove, each under an flock.
Standard library only: sent with ``python -c``."""
from common import sha256_file  # inlined when sent (edgeforge.runner.remote.script)
import fcntl
import json
import os
import shutil
import sys
import time
req = json.loads(sys.argv[1])
wd = os.path.abspath(os.path.expanduser(req["workdir"]))
top = os.path.join(wd, "deploy", req["name"])
rel_dir = os.path.join(top, "releases")
cur = os.path.join(top, "current")
out = {"dir": top}
def say(status, **kw):
    out.update(kw, status=status)
    print("@@edgeforge-releases " + json.dumps(out))
    sys.exit(0)
def bad_files(d, files):
    bad = []
    for rel, digest in sorted(files.items()):
        try:
            if sha256_file(os.path.join(d, rel)) != digest:
                bad.append(rel)
        except OSError:
            bad.append(rel)
    return bad
def meta(i):
    try:
        with open(os.path.join(rel_dir, i, "release.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def ids():
    try:
        return sorted(e for e in os.listdir(rel_dir) if not e.startswith(".")
                      and os.path.isdir(os.path.join(rel_dir, e)))
    except OSError:
        return []
def current():
    if not os.path.lexists(cur):
        return None, True
    if not os.path.islink(cur):
        say("error", kind="layout", message="%s is not a symlink" % cur)
    i = os.path.basename(os.readlink(cur).rstrip("/"))
    return i, os.path.isfile(os.path.join(rel_dir, i, "release.json"))
def previous(c):
    if c is None:
        return None
    for h in reversed(history(1000)):
        if h.get("to") == c:
            f = h.get("from")
            if f and f != c and meta(f) is not None:
                return f
            break
    older = [i for i in ids() if meta(i) is not None and i < c]
    return older[-1] if older else None
def history(n):
    try:
        with open(os.path.join(top, "history.jsonl")) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    got = []
    for ln in lines[-n:]:
        try:
            got.append(json.loads(ln))
        except ValueError:
            got.append({"unreadable": ln[:200]})
    return got
def model_of(i):
    try:
        with open(os.path.join(rel_dir, i, "manifest.json")) as f:
            n = json.load(f).get("name")
        return n if isinstance(n, str) else None
    except (OSError, ValueError, AttributeError):
        return None
def fsync_dir(d):
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
if req["op"] == "state" and not os.path.isdir(top):
    say("ok", releases=[], current=None, current_exists=None, previous=None, history=[])
try:
    os.makedirs(rel_dir, exist_ok=True)
    lock = os.open(os.path.join(top, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX)
except OSError as e:
    say("error", kind="layout", message="%s: %s" % (e.strerror, e.filename))
op = req["op"]
c, c_ok = current()
if op == "state":
    rels = []
    for i in ids():
        m = meta(i)
        rels.append({"id": i, "sealed": m is not None, "digest": (m or {}).get("digest"),
                     "sealed_at": (m or {}).get("sealed_at"), "files": (m or {}).get("files"),
                     "model": (m or {}).get("model") or model_of(i)})
    say("ok", releases=rels, current=c, current_exists=c_ok if c else None, previous=previous(c),
        history=history(req.get("history", 50)))
if op == "link":
    d = os.path.join(rel_dir, req["id"])
    sources = [os.path.join(rel_dir, i) for i in ids() if i != req["id"]]
    sources += [os.path.join(wd, s) for s in req.get("also", [])]
    linked = []
    for rel, digest in sorted(req["files"].items()):
        dst = os.path.join(d, rel)
        try:
            if sha256_file(dst) == digest:
                continue
        except OSError:
            pass
        for s in sources:
            src = os.path.join(s, rel)
            try:
                if not os.path.isfile(src) or sha256_file(src) != digest:
                    continue
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                tmp = dst + ".link-tmp"
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                try:
                    os.link(src, tmp)
                except OSError:
                    shutil.copyfile(src, tmp)
                os.replace(tmp, dst)
                linked.append(rel)
                break
            except OSError:
                continue
    say("ok", linked=linked)
if op == "seal":
    d = os.path.join(rel_dir, req["id"])
    bad = bad_files(d, req["files"])
    if bad:
        say("error", kind="digest", files=bad, message="sha256 mismatch for %s" % ", ".join(bad))
    m = dict(req["meta"], id=req["id"], files=req["files"], sealed_at=time.time())
    tmp = os.path.join(d, ".release.json.tmp")
    with open(tmp, "w") as f:
        json.dump(m, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(d, "release.json"))
    say("ok")
if op == "switch":
    to = req["to"]
    if req.get("expect", "*") != "*" and req["expect"] != c:
        say("error", kind="moved", current=c, message="current is %s, expected %s" % (c, req["expect"]))
    if to is not None:
        m = meta(to)
        if m is None:
            say("error", kind="unsealed", message="release %s is %s" % (to, "incomplete (its sha256 never "
                "checked out)" if os.path.isdir(os.path.join(rel_dir, to)) else "not on the device"))
        bad = bad_files(os.path.join(rel_dir, to), m.get("files") or {})
        if bad:
            say("error", kind="digest", files=bad, message="sha256 mismatch in %s for %s" % (to, ", ".join(bad)))
        tmp = os.path.join(top, ".current.new-%d" % os.getpid())
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(os.path.join("releases", to), tmp)
        os.replace(tmp, cur)
    elif os.path.lexists(cur):
        os.unlink(cur)
    fsync_dir(top)
    line = dict(req["record"], time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), to=to,
                **{"from": c, "from_missing": bool(c and not c_ok)})
    fd = os.open(os.path.join(top, "history.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    say("ok", **{"from": c, "to": to, "record": line})
if op == "prune":
    sealed = [i for i in ids() if meta(i) is not None]
    keep = set(sealed[-max(1, req["keep"]):]) | {c, previous(c)} | set(req.get("protect", []))
    removed = [i for i in ids() if i not in keep]
    for i in removed:
        shutil.rmtree(os.path.join(rel_dir, i), ignore_errors=True)
    say("ok", removed=removed)
if op == "sweep":
    removed = [i for i in ids() if meta(i) is None and i != c and i not in req.get("protect", [])]
    for i in removed:
        shutil.rmtree(os.path.join(rel_dir, i), ignore_errors=True)
    say("ok", removed=removed)
if op == "remove":
    if req["id"] == c:
        say("error", kind="current", message="release %s is current" % c)
    shutil.rmtree(os.path.join(rel_dir, req["id"]), ignore_errors=True)
    say("ok")
say("error", kind="usage", message="unknown op %r" % op)
