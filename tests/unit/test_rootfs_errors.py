"""rootfs failures raise their own class (edgeforge.errors.RootfsFailed), exit 4."""
from __future__ import annotations

import pytest

from edgeforge.device.provision import rootfs
from edgeforge.errors import ExitCode, RootfsFailed


def test_a_rootfs_that_cannot_be_unpacked_is_a_device_failure_of_its_own(tmp_path):
    """Not the bare EdgeforgeError (exit 3, 'a build pass failed'): the emulated device cannot
    be made, exit 4, and the half-unpacked directory is gone."""
    bad = tmp_path / "rootfs.tar.zst"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(RootfsFailed) as info:
        rootfs.unpack(bad, tmp_path / "tree")
    assert info.value.exit_code == ExitCode.DEVICE and "cannot unpack" in str(info.value)
    assert not (tmp_path / "tree").exists()
