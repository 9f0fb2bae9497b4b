"""edgeforge.stop_signals with real signals: Paddle's import no longer takes SIGTERM from
edgeforge (measured in a fresh interpreter with sigaction), and a block that holds signals
once its work is measured finishes it before the signal counts."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from edgeforge.errors import Stopped
from edgeforge.stop_signals import signals_held, signals_held_once

PROBE = textwrap.dedent("""
    import ctypes, os, signal, sys, time
    libc = ctypes.CDLL(None)
    class SA(ctypes.Structure):
        _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                    ("restorer", ctypes.c_void_p)]
    def handler_of(sig):
        sa = SA(); libc.sigaction(sig, None, ctypes.byref(sa)); return sa.handler
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt()))
    if sys.argv[1] == "keep":
        from edgeforge.stop_signals import keep_handlers
        keep_handlers()
    before = handler_of(signal.SIGTERM)
    from edgeforge.paddle_env import import_paddle
    import_paddle()
    print("same" if handler_of(signal.SIGTERM) == before else "replaced", flush=True)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    except KeyboardInterrupt:
        print("python handler ran", flush=True)
""")


@pytest.mark.parametrize("mode, want", [("plain", "replaced"), ("keep", "same\npython handler ran")])
def test_paddle_replaces_sigterm_and_keep_handlers_puts_it_back(mode, want):
    env = dict(os.environ, FLAGS_enable_pir_api="0")
    res = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=300, env=env)
    if mode == "plain":                          # Paddle's handler: its FatalError block (on stdout), killed
        assert res.stdout.startswith("replaced\n") and "FatalError: `Termination signal`" in res.stdout, res.stdout
        assert "python handler ran" not in res.stdout and res.returncode == -signal.SIGTERM, res.returncode
    else:
        assert res.stdout.strip() == want, res.stdout + res.stderr[-2000:]
        assert res.returncode == 0, res.stderr[-2000:]


def test_a_signal_before_ready_raises_at_once():
    with pytest.raises(Stopped):
        with signals_held_once(lambda: False):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)                       # the handler raises in it
            raise AssertionError("not raised at once")


@pytest.fixture
def hangup_default():
    """SIGHUP at its default for the test: under nohup it starts ignored, and a signal ignored
    when edgeforge starts stays ignored (stop_signals respects it), so it would not be recorded."""
    old = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, old)


def test_a_signal_once_ready_waits_for_the_block_and_is_recorded(hangup_default):
    done = []
    with signals_held_once(lambda: True) as held:
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGTERM)
        done.append("finished")
    assert done == ["finished"] and held == [signal.SIGHUP, signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is not None      # the old handlers are back


def test_signals_held_raises_after_the_block():
    done = []
    with pytest.raises(Stopped) as exc:
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            done.append("finished")
    assert done == ["finished"] and exc.value.signum == signal.SIGTERM
