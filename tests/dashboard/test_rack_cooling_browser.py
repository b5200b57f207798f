"""Drill-down in a real browser: the fleet page → a rack tile → the rack page → its
loop → the cooling page, each saved as a screenshot that must not be blank."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.browser_pages import live_rack_page, login, server_with_ops, shot

pytestmark = pytest.mark.browser


def test_fleet_to_rack_to_cooling(tmp_path: Path, browser: Any) -> None:
    with server_with_ops(tmp_path / "srv", racks=2) as server:
        token = enroll(server, "node:gpu-a01-01")
        assert post_json(server.url + "/api/v1/ingest", gpu_batch("gpu-a01-01", 1), token)[0] == 200
        rack_id = server.query("SELECT id FROM fleet_rack WHERE name = 'A01'")[0][0]
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


PUSH_MS = 15_000  # a bound on a hang, not a timing assertion


def test_a_gpu_that_goes_quiet_shows_its_age_instead_of_its_last_figures(
    tmp_path: Path, browser: Any
) -> None:
    """Its agent sends once, with samples 25 s old (fresh by the 30 s target), then falls
    silent: the tile shows the figure by push, then, with no reload, how long it has been
    quiet, and the number is gone."""
    with server_with_ops(tmp_path / "srv", racks=1) as server:
        page, node_id = live_rack_page(browser, server, "A01", "gpu-a01-01")
        page.evaluate("window.__reloaded = false")
        token = enroll(server, "node:gpu-a01-01")
        batch = gpu_batch("gpu-a01-01", 1, ts=time.time() - 25, temp_gpu_c=63)
        assert post_json(server.url + "/api/v1/ingest", batch, token)[0] == 200
        tile = page.locator(f"#node-{node_id} .gpu").first
        page.wait_for_function(
            "el => el.textContent.includes('63 °C')", arg=tile.element_handle(), timeout=PUSH_MS
        )
        page.wait_for_function(
            "el => /no data for \\d+ s/.test(el.textContent)",
            arg=tile.element_handle(),
            timeout=PUSH_MS,
        )
        assert "63 °C" not in tile.inner_text()  # never a frozen number
        assert tile.get_attribute("data-stale") == "1"
        # The level in words, not only a colour.
        assert tile.locator(".level-word").first.text_content() == "No data"
        assert page.evaluate("window.__reloaded") is False
        shot(page, tmp_path / "rack-stale.png")


def test_the_shared_live_client_follows_a_rack_and_ages_what_went_quiet(
    tmp_path: Path, browser: Any
) -> None:
    """FleetLive (static/dashboard/live.js), as the node and GPU pages use it: a rack's
    messages carry each GPU; an element whose data-ts is past the target reads "last data
    N s ago" with its figures hidden; a rack the user may not see says "not allowed"."""
    with server_with_ops(tmp_path / "srv", racks=1) as server:
        rack_id = server.query("SELECT id FROM fleet_rack WHERE name = 'A01'")[0][0]
        gpu_pk = server.query(
            "SELECT g.id FROM fleet_gpu g JOIN fleet_node n ON n.id = g.node_id"
            " WHERE n.name = 'gpu-a01-01' AND g.\"index\" = 2"
        )[0][0]
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        login(page, server)
        page.goto(f"{server.url}/racks/{rack_id}/")
        page.evaluate(CLIENT_PAGE, {"rack": rack_id, "gpu": str(gpu_pk)})
        page.wait_for_selector("#probe-status[data-state='live']")
        assert page.locator("#probe-status").inner_text() == "live"
        token = enroll(server, "node:gpu-a01-01")
        batch = gpu_batch("gpu-a01-01", 1, temp_gpu_c=71, power_w=455.0)
        assert post_json(server.url + "/api/v1/ingest", batch, token)[0] == 200
        page.wait_for_function("() => window.__probeGpu !== undefined", timeout=PUSH_MS)
        gpu = page.evaluate("window.__probeGpu")
        assert (gpu["index"], gpu["temp_c"], gpu["power_w"]) == (2, 71, 455.0)
        assert gpu["level_word"] in ("OK", "Warning", "Critical", "No data")
        aged = page.locator("#probe-aged")
        page.wait_for_function(
            "el => /last data \\d+ s ago/.test(el.textContent)",
            arg=aged.element_handle(),
            timeout=PUSH_MS,
        )
        assert aged.get_attribute("data-stale") == "1"
        assert page.locator("#probe-aged [data-fresh]").is_hidden()
        assert page.locator("#probe-fresh [data-fresh]").is_visible()
        page.wait_for_function(
            "() => document.getElementById('probe-refused').textContent === 'not allowed'",
            timeout=PUSH_MS,
        )


# Builds on the rack page (live.js is loaded there) what a page of its own would do.
CLIENT_PAGE = """({rack, gpu}) => {
  const add = (html) => document.querySelector('main').insertAdjacentHTML('beforeend', html);
  const now = Date.now() / 1000;
  add('<span id="probe-status"></span><span id="probe-refused"></span>');
  add(`<p id="probe-aged" data-ts="${now - 40}"><b data-fresh>61 °C</b> <i data-age></i></p>`);
  add(`<p id="probe-fresh" data-ts="${now - 2}"><b data-fresh>62 °C</b></p>`);
  FleetLive.watchStale(30, now);
  FleetLive.connect('/ws/live/rack/' + rack, (update) => {
    if (update.gpus && update.gpus[gpu].ts) window.__probeGpu = update.gpus[gpu];
  }, document.getElementById('probe-status'));
  FleetLive.connect('/ws/live/rack/99999999', () => {}, document.getElementById('probe-refused'));
}"""
