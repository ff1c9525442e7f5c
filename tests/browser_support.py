"""A real headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven through
chromedriver with selenium, for the report's browser tests and screenshots.

The flags keep Chromium from reaching out to the network (on a closed network it hangs
without them) and from needing a display, a GPU or a sandbox (the tests run as root).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1200,900")


class BrowserUnavailable(Exception):
    """Chromium or its driver is not installed, or Chromium cannot start here."""


@dataclass(frozen=True)
class LoadedPage:
    """What the browser saw of one page: its console errors, its images and its text."""

    errors: list[str]
    images: list[dict[str, Any]]
    verdict: str
    text: str


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """A started headless Chromium with a fresh profile; quit and the profile removed after."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            raise BrowserUnavailable(f"{path} is missing: install Debian's chromium and "
                                     "chromium-driver (make system-packages)")
    profile = tempfile.mkdtemp(prefix="harmony-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        try:
            driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
        except WebDriverException as exc:
            raise BrowserUnavailable(f"chromium did not start: {exc.msg}") from None
        try:
            driver.set_page_load_timeout(60)
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def load_page(driver: webdriver.Chrome, page: Path) -> LoadedPage:
    """Open ``page`` and read back what rendered: console errors (level SEVERE), every
    image's load state and natural size, the verdict's text and the whole page's text."""
    driver.get(page.resolve().as_uri())
    images = driver.execute_script(
        "return Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete, "
        "width: i.naturalWidth, height: i.naturalHeight}));")
    verdict = driver.execute_script(
        "const v = document.getElementById('verdict'); return v ? v.innerText : '';")
    text = driver.execute_script("return document.body.innerText;")
    errors = [str(entry.get("message")) for entry in driver.get_log("browser")
              if entry.get("level") == "SEVERE"]
    return LoadedPage(errors, list(images), str(verdict), str(text))


def screenshot(driver: webdriver.Chrome, page: Path, out: Path) -> Path:
    """A full-page PNG of ``page`` (the window stretched to the page's height)."""
    driver.get(page.resolve().as_uri())
    height = int(driver.execute_script("return document.documentElement.scrollHeight;"))
    driver.set_window_size(1200, min(max(height, 900), 16000))
    out.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(out))
    return out
