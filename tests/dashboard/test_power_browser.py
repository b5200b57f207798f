"""The power & PUE page in a real browser: its figures from a facility agent's batch,
updated by push without a reload, and a chart (or "chart unavailable" when plotly.js is
not served), saved as a screenshot that must not be blank."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent import enroll, post_json
from tests.support.browser_pages import login, server_with_ops, shot
from tests.support.server import FleetServer

pytestmark = pytest.mark.browser


def facility_batch(seq: int, total_w: float, it_w: float) -> dict[str, Any]:
    sample = {"ts": time.time(), "total_power_w": total_w, "it_power_w": it_w, "pue_category": 2}
    return {"protocol": 1, "source": "site:demo", "seq": seq, "facility": [sample]}


def a_day_of_minutes(server: FleetServer, site_id: int) -> None:
    """Rollup buckets for the chart: the last 3 hours of 1-minute means."""
    minute = int(time.time() // 60) * 60
    for k in range(1, 181):
        server.execute(
            "INSERT INTO fw_facility_1m (site_id, bucket, n, total_power_w_mean,"
            " it_power_w_mean, pue_category_min) VALUES (?, ?, 60, ?, ?, 2)",
            (site_id, minute - k * 60, 1.25e6 + 1e3 * (k % 30), 1.0e6),
        )


def test_power_page_shows_live_figures_and_a_chart(tmp_path: Path, browser: Any) -> None:
    with server_with_ops(tmp_path / "srv", racks=1) as server:
        site_id = server.query("SELECT id FROM fleet_site WHERE slug = 'demo'")[0][0]
        a_day_of_minutes(server, site_id)
        token = enroll(server, "site:demo")
        ingest = server.url + "/api/v1/ingest"
        assert post_json(ingest, facility_batch(1, 1.3e6, 1e6), token)[0] == 200
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        login(page, server)
        page.goto(server.url + "/power/")
        page.wait_for_selector("h1:has-text('Power & PUE')")
        site = page.locator(f"#power-site-{site_id}")
        assert site.locator("[data-field=total_power]").inner_text() == "1.30 MW"
        assert site.locator("[data-field=pue]").inner_text() == "1.30 (category 2: PDU output)"
        assert "facility − IT" in site.locator("[data-field=cooling_source]").inner_text()
        assert "24 h" in site.locator("table.rolling").inner_text()
        chart = site.locator(".chart")
        drawn = chart.get_attribute("data-chart")
        if drawn == "drawn":
            assert chart.locator(".main-svg").count() > 0
            site.locator("input[value=month]").check()  # the 30-day view, hourly means
            assert chart.get_attribute("data-span") == "month"
            site.locator("input[value=day]").check()
            assert chart.get_attribute("data-span") == "day"
            assert chart.locator("g.trace").count() == 2  # both lines drawn again
        else:  # plotly.js not served yet: the numbers stand, the chart says so
            assert "chart unavailable" in chart.inner_text()
        page.wait_for_selector("#live-status[data-state='live']")
        page.evaluate("window.__reloaded = false")
        assert post_json(ingest, facility_batch(2, 1.5e6, 1e6), token)[0] == 200
        pue = site.locator("[data-field=pue]")
        page.wait_for_function(
            "el => el.textContent.startsWith('1.50')", arg=pue.element_handle(), timeout=5000
        )
        assert page.evaluate("window.__reloaded") is False  # pushed, not reloaded
        shot(page, tmp_path / "power.png")
