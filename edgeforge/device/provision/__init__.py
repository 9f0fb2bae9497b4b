"""Making and equipping devices: runtime setup, the emulated aarch64 device, its rootfs, the local sshd (demo and tests)."""
