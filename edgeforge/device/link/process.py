"""Whether a process is alive, by its id: the lease (a holder on this host that died) and the
loopback sshd both ask."""
from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (or belongs to another user); False when gone or a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
