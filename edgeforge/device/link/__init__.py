"""Talking to one device: the inventory, the SSH transport, the one device session (connect with retries, the lease, signals), upload by digest, health, devices check."""
