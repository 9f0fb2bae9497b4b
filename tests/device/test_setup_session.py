"""`devices setup` reaches the device as bench does: it takes the device's lease (a lease another
run holds makes it busy, exit 4, with nothing done on the device; --wait waits for it first) and
honours --connect-timeout (a listener that never sends an SSH banner fails in about that time,
not in the 60 s default)."""
from __future__ import annotations

import time

import pytest

from edgeforge.device.link.inventory import load_inventory
from edgeforge.device.link.lease import Lease
from edgeforge.device.link.transport import SSHTransport

pytestmark = pytest.mark.device


def test_a_held_lease_makes_setup_busy_and_it_touches_nothing(cli, lab):
    inv = lab.inventory()
    with SSHTransport(load_inventory(inv).get("local")) as tr:
        lease = Lease(tr, 600, what="edgeforge bench (another run)").acquire()
        try:
            code, _, err = cli("devices", "setup", "local", "--inventory", inv, "--keep-inventory")
            t0 = time.monotonic()
            waited, _, werr = cli("devices", "setup", "local", "--inventory", inv, "--keep-inventory",
                                  "--wait", "1.5")
            took = time.monotonic() - t0
        finally:
            lease.release()
    assert code == 4 and "busy: leased by" in err and "edgeforge bench (another run)" in err, err
    assert waited == 4 and "still leased after waiting" in werr, werr
    assert took >= 1.5
    assert "Traceback" not in err + werr
    assert not (lab.workdir / "wheels").exists() and not (lab.workdir / "env").exists()
    assert not (lab.workdir / ".lease").exists()      # ours released; setup never held it


def _setup_time(cli, inv, connect_timeout: str) -> tuple[int, str, float]:
    t0 = time.monotonic()
    code, _, err = cli("devices", "setup", "local", "--inventory", inv, "--keep-inventory",
                       "--connect-timeout", connect_timeout, "--retries", "0")
    return code, err, time.monotonic() - t0


def test_setup_honours_connect_timeout(cli, lab, silent_port):
    inv = lab.inventory(port=silent_port)
    code, err, short = _setup_time(cli, inv, "1")
    assert code == 4 and "Traceback" not in err, err
    assert 1.0 <= short < 20, short           # the default would wait 60 s for the banner
    code, err, longer = _setup_time(cli, inv, "4")
    assert code == 4, err
    assert longer >= 4.0 and longer > short, (short, longer)
