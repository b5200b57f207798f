"""Drill-down in a real browser: the fleet page → a rack tile → the rack page → its
loop → the cooling page, each saved as a screenshot that must not be blank."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import pytest

from tests.dashboard.test_fleet_page_live import ARGS, CHROMIUM, login
from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.server import FleetServer

pytestmark = pytest.mark.browser

if CHROMIUM is None and os.environ.get("REQUIRE_BROWSER") == "1":
    raise RuntimeError("REQUIRE_BROWSER=1 but Debian chromium is not installed")


def distinct_bytes(png: bytes) -> int:
    """How many distinct byte values the decoded pixel rows hold: a blank (one-colour)
    page gives a handful (the colour and the row filter bytes), a drawn page far more."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, data = 8, b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        if kind == b"IDAT":
            data += png[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(data)))


def shot(page, path: Path) -> None:  # type: ignore[no-untyped-def]
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    assert distinct_bytes(path.read_bytes()) > 32, f"{path.name} looks blank"


def test_fleet_to_rack_to_cooling(tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.skip("Debian chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    env = {"DJANGO_SUPERUSER_PASSWORD": "ops-password-1"}
    with FleetServer.started(tmp_path / "srv", racks=2, extra_env=env) as server:
        server.manage("createsuperuser", "--noinput", "--username", "ops", "--email", "o@x.io")
        token = enroll(server, "node:gpu-a01-01")
        assert post_json(server.url + "/api/v1/ingest", gpu_batch("gpu-a01-01", 1), token)[0] == 200
        rack_id = server.query("SELECT id FROM fleet_rack WHERE name = 'A01'")[0][0]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            login(page, server)
            shot(page, tmp_path / "fleet.png")
            page.click(f"#rack-{rack_id} a.rack-name")
            page.wait_for_selector("h1:has-text('Rack A01')")
            assert page.url.endswith(f"/racks/{rack_id}/")
            assert page.locator(".gpu").count() > 0
            assert "kW" in page.locator("#rack-power").inner_text()
            shot(page, tmp_path / "rack.png")
            page.click("#loop-link")
            page.wait_for_selector("h1:has-text('Cooling')")
            assert "/cooling/" in page.url
            assert page.locator(".loop").first.inner_text().startswith("CDU-1")
            assert page.locator(f"a[href='/racks/{rack_id}/']").count() == 1
            shot(page, tmp_path / "cooling.png")
            browser.close()
