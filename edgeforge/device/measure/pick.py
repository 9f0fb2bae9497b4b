"""Which bench runs on a device, by its transport, and the one-device ``bench`` verb's library call.

``transport = "ssh"`` (the default) is :class:`.bench.Bench`; ``transport = "browser"`` is
:class:`.browser.BrowserBench` (a local headless Chromium). bench, sweep and
fleet ask :func:`bench_class`.
"""
from __future__ import annotations

from pathlib import Path

from ...options import BenchOptions
from ..link.health import guarded
from ..link.inventory import Device, load_inventory
from ..link.settings import resolve_settings, validate_build
from .bench import Bench, BenchOutcome, Step
from .browser import BrowserBench


def bench_class(device: Device) -> type[Bench]:
    """The bench for ``device``'s transport: SSH (:class:`Bench`), or a local browser
    (:class:`.browser.BrowserBench`)."""
    if device.transport == "browser":
        return BrowserBench
    return Bench


def bench(build_dir, device: str, opts: BenchOptions | None = None, *,
          on_step: Step | None = None, tags: dict | None = None) -> BenchOutcome:
    """Bench BUILD_DIR on DEVICE (a name in the inventory). Returns the result and where it
    was written. ``opts``: see :class:`edgeforge.options.BenchOptions` (``threads`` and
    ``power_mode`` override the build's runtime settings; ``health``: refuse a device marked
    unhealthy and count this bench in its health, see :mod:`.health`). ``tags``: top-level
    keys added to the result.

    Raises ConfigError (bad build, flag or inventory) or DeviceError (the device failed, is
    busy, or is marked unhealthy)."""
    from ...api import read_manifest

    opts = opts or BenchOptions()
    manifest = read_manifest(build_dir)
    validate_build(Path(build_dir), manifest)
    inv = load_inventory(opts.connection.inventory)
    dev = inv.get(device)
    b = bench_class(dev)(build_dir, dev, resolve_settings(manifest, dev, opts), opts, on_step=on_step,
                         tags=tags)
    return guarded(inv.path, dev.name, b.run, enabled=opts.health)
