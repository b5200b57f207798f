"""Debian's chromium for Playwright (browser downloads are impossible here): where it is
and how it is launched, for the browser tests (tests/conftest.py) and bench/freshness.py."""

from __future__ import annotations

import shutil
from pathlib import Path


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
