"""Model versions on devices: deploy, canaries, rollback, the releases on a device."""
