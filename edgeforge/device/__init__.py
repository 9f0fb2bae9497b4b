"""Devices: everything that talks to a device, one sub-package per concern, each a layer that
imports only the ones below it (tests/unit/test_layers.py):

- ``link``: talking to one device (the inventory, the SSH transport, the one device session,
  upload by digest, leases, health, ``devices check``);
- ``provision``: making and equipping devices (runtime setup, the emulated device, the local sshd);
- ``measure``: bench, fleet, sweep, load;
- ``release``: deploy, canaries, rollback, the releases on a device;
- ``workflow``: building and measuring together (``--precision auto``).

Failures leave as :class:`edgeforge.errors.DeviceError`.
"""
