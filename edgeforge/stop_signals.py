"""edgeforge's stop handlers stay installed after a native library loads.

``import paddle`` installs Paddle's own C++ SIGTERM handler (measured with ``sigaction`` around
each import, Paddle 3.3.1: SIGTERM's handler changes, SIGINT's and SIGHUP's do not; importing
onnxruntime, onnx, paddle2onnx or paddleslim, and running a ``paddle.inference`` predictor,
change none). Python still reports its own handler, but the process then dies with exit 143
and a "FatalError: Termination signal" block: no ``finally`` runs, a user metric's child is
orphaned and ``edgeforge-build-*`` / ``edgeforge-native-*`` temporary directories stay behind.

:func:`keep_handlers` (installed by the CLI) re-installs the Python-level handlers of SIGINT,
SIGTERM and SIGHUP right after such a module is first imported, whoever imports it.

:func:`signals_held` and :func:`signals_held_once` let cleanup and bookkeeping finish before a
stop signal takes effect (a lab place given back; a bench's lease released and its measured
result written).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

from .errors import Stopped

STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
NATIVE = ("paddle",)            # top-level modules whose import replaces a handler (measured)


def restore() -> None:
    """Re-install the Python-level handler of each stop signal (main thread only; a signal
    whose handler Python does not know, ``None``, is left alone)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in STOP_SIGNALS:
        handler = signal.getsignal(sig)
        if handler is not None:
            signal.signal(sig, handler)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds :data:`NATIVE` modules through the usual path finder and calls :func:`restore`
    once the module has executed."""

    def find_spec(self, name, path=None, target=None):
        if name not in NATIVE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            try:
                run(module)
            finally:
                restore()
        spec.loader.exec_module = exec_module
        return spec


def keep_handlers() -> None:
    """Install the import hook (once); if a native module is already loaded, restore now."""
    import sys

    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
    if any(name in sys.modules for name in NATIVE):
        restore()


def _stop(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum)


@contextmanager
def signals_held_once(ready: Callable[[], bool]) -> Iterator[list[int]]:
    """SIGINT, SIGTERM and SIGHUP raise as usual (KeyboardInterrupt / Stopped) while ``ready()``
    is false; once it is true they are recorded in the yielded list and the block runs to its
    end; the caller decides what the record means. Main thread only (elsewhere: nothing held)."""
    got: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def on_signal(signum, frame):
        if not got and not ready():
            raise _stop(signum)
        got.append(signum)
    old = {}
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            old[sig] = signal.signal(sig, on_signal)
    try:
        yield got
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait until the block is done (main thread only), then raise
    as they would have (KeyboardInterrupt / Stopped): cleanup is not cut short."""
    with signals_held_once(lambda: True) as got:
        try:
            yield
        finally:
            if got:
                raise _stop(got[0])
