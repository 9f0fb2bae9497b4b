"""Gate results as JUnit XML: one <testsuite> per device, one <testcase> per gate and result."""
from __future__ import annotations

import datetime as _dt
import xml.etree.ElementTree as ET
from pathlib import Path

from ..fsutil import check_ours, write_files_atomic
from .gates import GateResult


def junit_tree(gates: list[GateResult]) -> ET.ElementTree:
    failures = sum(not g.passed for g in gates)
    root = ET.Element("testsuites", name="edgeforge gates", tests=str(len(gates)), failures=str(failures),
                      errors="0", time="0")
    stamp = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    for device in dict.fromkeys(g.device for g in gates):
        cases = [g for g in gates if g.device == device]
        suite = ET.SubElement(root, "testsuite", name=f"edgeforge.gates.{device}", tests=str(len(cases)),
                              failures=str(sum(not g.passed for g in cases)), errors="0", skipped="0",
                              time="0", timestamp=stamp)
        for g in cases:
            case = ET.SubElement(suite, "testcase", classname=f"edgeforge.gates.{device}", name=g.case_name, time="0")
            detail = (f"{g.message}\ndevice: {device} ({g.fingerprint})\nartifact: {g.artifact_sha256}\n"
                      f"measured: {_num(g.measured)}\nthreshold: {_num(g.threshold)}\n")
            if g.passed:
                ET.SubElement(case, "system-out").text = detail
            else:
                ET.SubElement(case, "failure", message=g.message, type=g.name).text = detail
    tree = ET.ElementTree(root)
    ET.indent(tree)
    return tree


_FIX = "pass --junit a file path in a writable directory"


def check_junit_path(path: str | Path) -> Path:
    """Refuse, before anything runs, a ``--junit`` path that cannot be written or holds a file
    edgeforge did not write (ConfigError, exit 2, naming ``--junit`` and the file)."""
    from ..errors import ConfigError

    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise ConfigError(f"--junit {path}: is a directory, not a file", hint=_FIX)
    above = path.parent
    while not (above.exists() or above.is_symlink()) and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise ConfigError(f"--junit {path} is below {above}, which is not a directory", hint=_FIX)
    check_ours(path, "--junit", (b'<testsuites name="edgeforge gates"',), "not edgeforge's JUnit XML")
    return path


def write_junit(gates: list[GateResult], path: str | Path) -> Path:
    """Write the JUnit XML for ``gates`` to ``path`` atomically; return the path. A path that
    cannot be written, or a file there that edgeforge did not write, is a ConfigError (exit 2)
    naming ``--junit`` and the file."""
    from ..errors import ConfigError
    from ..oserror import os_error_text

    path = check_junit_path(path)
    data = ET.tostring(junit_tree(gates).getroot(), encoding="utf-8", xml_declaration=True)
    try:
        write_files_atomic({path: data + b"\n"})
    except OSError as exc:
        raise ConfigError(f"--junit {path}: cannot write it ({os_error_text(exc)})", hint=_FIX) from None
    return path


def _num(v) -> str:
    return "n/a" if v is None else f"{v:.6g}"
