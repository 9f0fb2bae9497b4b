"""Devices: the inventory (devices.toml), the SSH transport (fabric), bench and device checks.

Everything that talks to a device lives here; failures leave as :class:`edgeforge.errors.DeviceError`.
"""
