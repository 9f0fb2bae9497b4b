"""A local headless Chromium for ``transport = "browser"`` devices: the loopback server (COOP/COEP), chromedriver in its own process group, the runner page, ``devices check``."""
