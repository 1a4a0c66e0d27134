"""A real browser for the page tests: Debian's headless Chromium driven through its ChromeDriver
(``make test`` installs both with scripts/ensure-chromium.sh), started with the flags a machine
with no network needs and a fresh profile, and quit afterwards."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)
"""Headless, as root, and quiet: without the background-networking flags Chromium keeps trying
to reach Google's hosts, which a closed network refuses."""


class BrowserUnavailable(RuntimeError):
    """Why the page tests are skipped."""


def unavailable() -> str | None:
    """Why no browser can be started here (None: one can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the dev extra)"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not path.exists():
            return f"{path} is missing (make test installs Debian's {package} package)"
    return None


@contextmanager
def browser(width: int = 1400, height: int = 1000) -> Iterator[WebDriver]:
    """A headless Chromium with a fresh profile; quit and its profile removed afterwards."""
    reason = unavailable()
    if reason is not None:
        raise BrowserUnavailable(reason)
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="statechan-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    try:
        driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    except WebDriverException as exc:
        shutil.rmtree(profile, ignore_errors=True)
        raise BrowserUnavailable(f"chromium did not start: {exc.msg}") from None
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver: WebDriver, path: Path, width: int = 1400, most: int = 2400) -> None:
    """The page as a PNG, ``width`` wide and as tall as its content (at most ``most`` pixels),
    from where it is scrolled to; the window's own size is put back afterwards."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    top = int(driver.execute_script("return window.scrollY"))
    metrics = {"width": width, "height": min(most, max(400, height - top)), "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(path))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
