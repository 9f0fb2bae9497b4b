"""Every verb that reaches a device goes through the one device session and honours the same
connection flags: against a listener that never sends an SSH banner, ``--connect-timeout 1
--retries 0`` fails with exit 4 in about a second (not the target's 10 s default), and
``--retries 1`` tries once more after the 0.5 s backoff and says so (issue 24)."""
from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.device

VERBS = {
    "bench": lambda b: ["bench", b, "--device", "local", "--runs", "1", "--warmups", "0"],
    "load": lambda b: ["load", b, "--device", "local", "--concurrency", "1", "--duration", "0.2"],
    "deploy": lambda b: ["deploy", b, "--device", "local"],
    "rollback": lambda b: ["rollback", "digits", "--device", "local"],
    "releases": lambda b: ["releases", "digits", "--device", "local"],
    "devices check": lambda b: ["devices", "check", "local"],
    "devices setup": lambda b: ["devices", "setup", "local", "--keep-inventory"],
}


def _timed(cli, argv):
    t0 = time.monotonic()
    code, _, err = cli(*argv)
    return code, err, time.monotonic() - t0


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_device_verb_honours_connect_timeout_and_retries(verb, cli, lab, builds, silent_port):
    base = [*VERBS[verb](builds.onnx), "--inventory", lab.inventory(port=silent_port),
            "--connect-timeout", "1", "--trust-new-host", "-q"]
    if verb not in ("releases", "devices check"):
        base += ["--wait", "0"]                       # the verbs that take the lease
    if verb not in ("devices check", "devices setup", "releases", "rollback"):
        base += ["--results", lab.results]
    code, err, once = _timed(cli, [*base, "--retries", "0"])
    assert code == 4 and "Traceback" not in err, err
    assert "device local" in err and err.startswith("error: "), err
    assert 1.0 <= once < 8, once                      # the target's default would wait 10 s
    assert "tries)" not in err, err
    code, err, twice = _timed(cli, [*base, "--retries", "1"])
    assert code == 4 and "(after 2 tries)" in err, err
    assert twice >= 2.5, twice                        # 1 s, the 0.5 s backoff, 1 s again
