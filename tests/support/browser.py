"""Debian's chromium for Playwright (browser downloads are impossible here): where it is
and how it is launched, for the browser tests (tests/conftest.py) and
bench/freshness_browser.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def chromium_path() -> str | None:
    return shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
    )


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def launched_chromium() -> Iterator[Any]:
    """A browser fixture's body: Debian's chromium through Playwright, closed afterwards.
    Without chromium the tests skip, or fail where REQUIRE_BROWSER=1 (CI) asks for it."""
    from tests.support import needs  # pytest: the benches import this module without it

    path = chromium_path()
    if path is None:
        needs.missing(needs.BROWSER, "Debian chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
