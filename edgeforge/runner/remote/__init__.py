"""The device-side scripts the host sends with ``python -c``: standard library only, nothing of
edgeforge (tests/unit/test_layers.py). Each is a file here, read when it is sent; a script that
says ``from common import ...`` gets common.py inlined in that line's place, since a script sent
alone has nothing on the device to import from."""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ("prepare", "lease", "releases", "install")
_SHARED = "from common import sha256_file"


def script(name: str) -> str:
    """The text of ``<name>.py`` as it is sent: common.py inlined where it is imported."""
    if name not in SCRIPTS:
        raise ValueError(f"no device-side script {name!r}")
    lines = (HERE / f"{name}.py").read_text().splitlines(keepends=True)
    common = (HERE / "common.py").read_text()
    return "".join(common if ln.split("#")[0].strip() == _SHARED else ln for ln in lines)
