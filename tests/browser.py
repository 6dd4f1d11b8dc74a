"""Headless Chromium for the browser tests (Debian's `chromium` and `chromium-driver`, Selenium).

`make browser` installs them (apt + pip), `make test` runs it best-effort first; where any piece
is missing, `chromium_driver` skips the test naming what is missing and how to get it. Nothing is
downloaded here: the driver binary is given to Selenium, so Selenium Manager never runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)
HOW = "run `make browser` (apt-get install chromium chromium-driver; pip install selenium)"


def _which(*names: str) -> str | None:
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    return None


def missing() -> list[str]:
    """What the browser tests lack on this machine (empty: they can run)."""
    out = []
    try:
        import selenium  # noqa: F401
    except ImportError:
        out.append("the Python package selenium")
    if _which("chromium", "chromium-browser") is None:
        out.append("the chromium browser (Debian package chromium)")
    if _which("chromedriver") is None:
        out.append("chromedriver (Debian package chromium-driver)")
    return out


def chromium_driver(profile: Path, width: int = 1500, height: int = 950):
    """A headless Chromium WebDriver with a fresh profile in `profile`; skips when one is missing."""
    lack = missing()
    if lack:
        pytest.skip(f"browser test skipped: missing {', '.join(lack)}; {HOW}")
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for f in FLAGS:
        opts.add_argument(f)
    profile.mkdir(parents=True, exist_ok=True)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.add_argument(f"--window-size={width},{height}")
    opts.binary_location = _which("chromium", "chromium-browser")
    try:
        return webdriver.Chrome(service=Service(_which("chromedriver")), options=opts)
    except WebDriverException as exc:
        pytest.skip(f"browser test skipped: headless chromium did not start ({str(exc).splitlines()[0]}); {HOW}")


def wait_ready(driver, timeout: float = 120.0) -> dict:
    """Wait for the explorer's own ready flag; return its timings (`window.__explorer`)."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout).until(
        lambda d: d.execute_script("return !!(window.__explorer && window.__explorer.ready)")
    )
    return driver.execute_script("return window.__explorer")


def select(driver, element_id: str, value: str) -> None:
    """Choose `value` in the <select> `element_id` as a user would (fires its change event)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(By.ID, element_id)).select_by_value(value)
