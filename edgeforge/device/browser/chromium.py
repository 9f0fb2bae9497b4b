"""A local headless Chromium, driven through chromedriver by selenium (no browser downloaded).

:class:`Chromium` starts Debian's ``chromedriver`` in a process group of its own (``setsid``);
chromedriver starts ``chromium``, whose zygote, renderer and GPU processes stay in that group.
:meth:`Chromium.close` asks the driver to quit, then sends SIGKILL to the whole group, so no
browser process outlives the verb, whatever state the page is in. A watchdog thread does the same
at the total deadline: a hung page cannot hold the bench past it.
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

from ...errors import ConfigError

DEFAULT_BROWSERS = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser")
DEFAULT_DRIVERS = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-dev-shm-usage",
         "--disable-extensions", "--mute-audio")
APT_HINT = "install them: apt-get install chromium chromium-driver (make test-web does)"


def find_binary(explicit: str | None, defaults: tuple[str, ...], what: str) -> str:
    """``explicit`` (a devices.toml key) or the first of ``defaults`` that exists."""
    for cand in ([explicit] if explicit else list(defaults)):
        path = shutil.which(cand) or (cand if os.access(cand, os.X_OK) else None)
        if path:
            return path
    named = explicit or " or ".join(defaults)
    raise ConfigError(f"no {what} at {named}", hint=APT_HINT)


def selenium_module():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise ConfigError("a browser device needs selenium, which is not installed",
                          hint="pip install 'edgeforge[web]' (selenium 4.51.0)") from None
    return webdriver, Service


class Chromium:
    """One headless Chromium session with a fresh profile; a context manager that always closes."""

    def __init__(self, browser: str | None = None, driver: str | None = None, load_timeout_s: float = 60.0):
        self.browser = find_binary(browser, DEFAULT_BROWSERS, "chromium")
        self.driver_path = find_binary(driver, DEFAULT_DRIVERS, "chromedriver")
        self.load_timeout_s = float(load_timeout_s)
        self.profile: str | None = None
        self.driver = None
        self.service = None
        self.pgid: int | None = None
        self.killed_at_deadline = False
        self._watchdog: threading.Timer | None = None
        self._closed = threading.Event()

    def start(self) -> "Chromium":
        webdriver, Service = selenium_module()

        self.profile = tempfile.mkdtemp(prefix="edgeforge-chromium-")
        opts = webdriver.ChromeOptions()
        opts.binary_location = self.browser
        for flag in FLAGS:
            opts.add_argument(flag)
        opts.add_argument(f"--user-data-dir={self.profile}")
        opts.page_load_strategy = "normal"
        self.service = Service(self.driver_path, log_output=os.devnull, popen_kw={"start_new_session": True})
        try:
            self.driver = webdriver.Chrome(service=self.service, options=opts)
        except Exception as exc:  # noqa: BLE001 - selenium's, urllib3's or OSError: the browser did not start
            self._remember_group()
            self.close()
            raise RuntimeError(f"chromium did not start: {_first_line(getattr(exc, 'msg', None) or exc)}") from None
        self._remember_group()
        self.driver.set_page_load_timeout(self.load_timeout_s)
        return self

    def _remember_group(self) -> None:
        proc = getattr(self.service, "process", None)
        if proc is not None and self.pgid is None:
            try:
                self.pgid = os.getpgid(proc.pid)
            except OSError:
                self.pgid = None

    @property
    def version(self) -> str | None:
        caps = getattr(self.driver, "capabilities", None) or {}
        return caps.get("browserVersion")

    @property
    def driver_version(self) -> str | None:
        caps = getattr(self.driver, "capabilities", None) or {}
        return ((caps.get("chrome") or {}).get("chromedriverVersion") or "").split(" ")[0] or None

    def deadline(self, seconds: float) -> None:
        """Kill the browser ``seconds`` from now unless closed before (the total deadline)."""
        def fire():
            if not self._closed.is_set():
                self.killed_at_deadline = True
                self.kill()
        self._watchdog = threading.Timer(max(0.0, seconds), fire)
        self._watchdog.daemon = True
        self._watchdog.start()

    def kill(self) -> None:
        """SIGKILL to chromedriver's process group: chromedriver, chromium and its children."""
        self._remember_group()
        if self.pgid is not None and self.pgid != os.getpgid(0):
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc = getattr(self.service, "process", None)
        if proc is not None:
            try:
                proc.kill()
                proc.wait(timeout=5)
            except (OSError, ValueError):
                pass
            except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: the group kill above is the backstop
                pass

    def close(self) -> None:
        """Quit the session (bounded), then kill the group; remove the profile."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self.driver is not None and not self.killed_at_deadline:
            done = threading.Event()

            def quit_():
                try:
                    self.driver.quit()
                except Exception:  # noqa: BLE001 - quitting a dead session: the kill below ends it
                    pass
                done.set()
            threading.Thread(target=quit_, daemon=True).start()
            done.wait(5.0)
        self.kill()
        _wait_group_gone(self.pgid, 5.0)
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _wait_group_gone(pgid: int | None, seconds: float) -> None:
    if pgid is None:
        return
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        time.sleep(0.05)


def _first_line(text: str) -> str:
    """The first sentence of selenium's message (its pointers to logs and docs cut off)."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    first = (lines[0] if lines else "no message").split("; For documentation")[0]
    return first.split(". Examine ChromeDriver")[0].rstrip(".")[:200]


def group_processes(pgid: int) -> list[int]:
    """The live pids of process group ``pgid`` (from /proc): what a test checks is empty."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry.name))
    return out
