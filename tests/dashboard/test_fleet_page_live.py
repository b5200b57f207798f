"""The fleet overview in a real browser: it shows racks and updates by push, without reload."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.browser import launched_chromium
from tests.support.browser_pages import login
from tests.support.live import create_ops_user
from tests.support.server import FleetServer

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    yield from launched_chromium()


@pytest.fixture(scope="module")
def ops_user(fleet_server: FleetServer) -> None:
    create_ops_user(fleet_server)


def test_fleet_page_needs_a_login(fleet_server: FleetServer, browser) -> None:  # type: ignore[no-untyped-def]
    page = browser.new_page()
    page.goto(fleet_server.url + "/")
    assert "/admin/login/" in page.url
    page.close()


def test_fleet_page_updates_a_rack_by_push_after_ingest(
    fleet_server: FleetServer,
    ops_user: None,
    browser,  # type: ignore[no-untyped-def]
) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    login(page, fleet_server)
    racks = fleet_server.query("SELECT count(*) FROM fleet_rack")[0][0]
    assert page.locator(".rack").count() == racks  # a tile per rack
    page.wait_for_selector("#live-status[data-state='live']")
    rack_id = fleet_server.query("SELECT id FROM fleet_rack WHERE name = 'A02'")[0][0]
    tile = page.locator(f"#rack-{rack_id}")
    before = tile.locator("[data-field=power]").inner_text()
    page.evaluate("window.__reloaded = false")

    token = enroll(fleet_server, "node:gpu-a02-01")
    batch = gpu_batch("gpu-a02-01", 1, power_w=612.5, temp_gpu_c=80)
    batch["gpu_info"] = [
        {"gpu": i, "model": "NVIDIA H200", "limits": {"slowdown_c": 89}} for i in range(8)
    ]
    sent = time.monotonic()
    assert post_json(fleet_server.url + "/api/v1/ingest", batch, token)[0] == 200
    power = tile.locator("[data-field=power]")
    page.wait_for_function(
        "el => el.textContent.trim() === '4.9'", arg=power.element_handle(), timeout=5000
    )
    took = time.monotonic() - sent
    assert before == "–"
    assert tile.locator("[data-field=headroom]").inner_text() == "9 °C to slowdown"
    assert page.evaluate("window.__reloaded") is False  # pushed, not reloaded
    assert took < 3.0
    page.screenshot(path=str(fleet_server.var_dir / "fleet.png"))
    page.close()


def test_live_socket_refuses_a_visitor_without_a_session(fleet_server: FleetServer) -> None:
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    with (
        connect(
            fleet_server.ws_url + "/ws/live/fleet",
            additional_headers={"Origin": fleet_server.url},
        ) as ws,
        pytest.raises(ConnectionClosed) as closed,
    ):
        ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401


def test_a_page_left_open_after_logout_stops_receiving_and_returns_to_login(
    tmp_path,  # type: ignore[no-untyped-def]
    browser,  # type: ignore[no-untyped-def]
) -> None:
    env = {"FLEETWATCH_LIVE_REAUTH_S": "2", "DJANGO_SUPERUSER_PASSWORD": "ops-password-1"}
    with FleetServer.started(tmp_path / "srv", racks=1, extra_env=env) as server:
        server.manage("createsuperuser", "--noinput", "--username", "ops", "--email", "o@x.io")
        context = browser.new_context()
        page = context.new_page()
        login(page, server)
        page.wait_for_selector("#live-status[data-state='live']")
        # Past a routine re-check, pushes still arrive on the reconnected socket.
        page.wait_for_timeout(3000)
        token = enroll(server, "node:gpu-a01-01")
        assert post_json(server.url + "/api/v1/ingest", gpu_batch("gpu-a01-01", 1), token)[0] == 200
        rack_id = server.query("SELECT id FROM fleet_rack WHERE name = 'A01'")[0][0]
        power = page.locator(f"#rack-{rack_id} [data-field=power]")
        page.wait_for_function(
            "el => el.textContent.trim() === '3.2'", arg=power.element_handle(), timeout=5000
        )
        other = context.new_page()  # the same browser logs out in another tab
        other.goto(server.url + "/admin/")
        other.click("#logout-form button")
        page.wait_for_url("**/admin/login/**", timeout=10000)
        context.close()


HW_THERMAL_SLOWDOWN = 0x40  # NVML clock-event reason (agents/protocol/reasons.py)


def test_heat_map_modes_switch_with_the_keyboard_and_stay_in_the_url(
    fleet_server: FleetServer,
    ops_user: None,
    browser,  # type: ignore[no-untyped-def]
) -> None:
    token = enroll(fleet_server, "node:gpu-a01-01")
    batch = gpu_batch(
        "gpu-a01-01", 1, power_w=250.0, temp_gpu_c=88, clock_event_reasons=HW_THERMAL_SLOWDOWN
    )
    batch["gpu_info"] = [
        {"gpu": i, "model": "NVIDIA H200", "limits": {"slowdown_c": 89}} for i in range(8)
    ]
    assert post_json(fleet_server.url + "/api/v1/ingest", batch, token)[0] == 200
    rack_id = fleet_server.query("SELECT id FROM fleet_rack WHERE name = 'A01'")[0][0]
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    login(page, fleet_server)
    tile = page.locator(f"#rack-{rack_id}")

    def shows() -> tuple[str | None, str, str]:
        return (
            tile.get_attribute("data-mode-level"),
            tile.locator("[data-field=mode-word]").inner_text(),
            tile.locator("[data-field=mode-figure]").inner_text(),
        )

    level, word, figure = shows()  # overall: throttled and 1 °C from slowdown
    assert (level, word) == ("crit", "CRITICAL") and "in thermal slowdown" in figure
    assert "CDU-1" in tile.locator(".cooling").inner_text()  # the loop serving it
    page.focus("input[name=mode][value=overall]")
    page.keyboard.press("ArrowRight")  # a radio group: arrows move the choice
    assert page.url.endswith("?mode=power")
    level, word, figure = shows()
    assert level == "ok" and word == "OK" and figure == "2.0 of 45 kW (4 % of budget)"
    page.keyboard.press("ArrowRight")
    assert shows() == ("crit", "CRITICAL", "hottest GPU 1 °C to slowdown")
    page.keyboard.press("ArrowRight")
    assert shows() == ("crit", "CRITICAL", "8 in thermal slowdown · 0 at their power limit")
    page.keyboard.press("ArrowRight")
    assert shows() == ("ok", "OK", "no alerts firing")
    page.goto(fleet_server.url + "/?mode=headroom")  # remembered in the URL
    assert page.locator("input[name=mode][value=headroom]").is_checked()
    assert shows()[2] == "hottest GPU 1 °C to slowdown"
    page.close()


def test_a_cdu_pump_failure_turns_its_loop_and_racks_red_with_throttling_within_2_s(
    fleet_server: FleetServer,
    ops_user: None,
    browser,  # type: ignore[no-untyped-def]
) -> None:
    """The headline scenario's data (CDU-1: pumps failed, no flow; a node of A02 in hardware
    thermal slowdown) reaches the open fleet page within 2 s of the server taking it. (A02:
    the module's other tests leave A01 critical already.)"""
    from agents.protocol import reasons as nvml

    page = browser.new_page(viewport={"width": 1280, "height": 800})
    login(page, fleet_server)
    page.wait_for_selector("#live-status[data-state='live']")
    rack_id = fleet_server.query("SELECT id FROM fleet_rack WHERE name = 'A02'")[0][0]
    tile = page.locator(f"#rack-{rack_id}")
    assert tile.get_attribute("data-level") != "crit"

    site = enroll(fleet_server, "site:demo")
    loop = {"ts": time.time(), "loop": "CDU-1", "supply_c": 34.0, "return_c": 34.2}
    loop |= {"flow_lpm": 0.0, "pumps_running": 0, "pumps_failed": 3}
    node = enroll(fleet_server, "node:gpu-a02-04")
    gpus = gpu_batch(
        "gpu-a02-04", 1, temp_gpu_c=90, power_w=180.0, clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN
    )
    gpus["gpu_info"] = [
        {"gpu": i, "model": "NVIDIA H200", "limits": {"slowdown_c": 89}} for i in range(8)
    ]
    ingest = fleet_server.url + "/api/v1/ingest"
    assert (
        post_json(ingest, {"protocol": 1, "source": "site:demo", "seq": 1, "loop": [loop]}, site)[0]
        == 200
    )
    assert post_json(ingest, gpus, node)[0] == 200
    arrived = time.monotonic()
    page.wait_for_function(
        "el => el.dataset.level === 'crit'"
        " && el.querySelector('[data-field=loop-word]').dataset.level === 'crit'"
        " && el.querySelector('[data-field=throttle]').textContent"
        "   .includes('8 GPU(s) in thermal slowdown')",
        arg=tile.element_handle(),
        timeout=2000,
    )
    took = time.monotonic() - arrived
    assert took <= 2.0
    assert "CRITICAL" in tile.inner_text().upper()  # a word, not only a colour
    strip = page.locator("[data-field=throttling]").first
    assert int(strip.inner_text().split(" in thermal slowdown")[0]) >= 8  # the site's sum
    page.screenshot(path=str(fleet_server.var_dir / "fleet-cdu-failure.png"))
    page.close()
