"""A file the connection needs and cannot open is named (issue 23: "connecting failed on ...:
No such file or directory", without the file, and exit 4 as if the device had failed)."""
from __future__ import annotations


def test_a_missing_identity_file_is_named_and_is_the_inventorys_fault(cli, lab, tmp_path):
    key = tmp_path / "no-such-key"
    code, out, err = cli("devices", "check", "local", "--inventory", lab.inventory(identity=str(key)))
    line = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 2 and len(line) == 1, err
    assert line[0] == f"error: device local: identity {key}: no such file; fix identity in the device inventory"
    assert "internal error" not in err
