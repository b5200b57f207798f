"""The rack and cooling pages in a real browser follow the fleet by push: a GPU past its
slowdown limit and a CDU whose pumps failed appear without a reload, the morph leaves the
reader's focus where it was, a hidden tab lets its socket go until shown again, and a
server that goes away is said in words until the page is live again by itself."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agents.protocol import reasons as nvml
from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.browser_pages import live_rack_page, server_with_ops, shot

pytestmark = pytest.mark.browser

PUSH_MS = 10_000  # a bound on a hang, not a timing assertion
HIDE = (  # what the browser does when the tab is hidden (true) or shown again (false)
    "Object.defineProperty(document, 'hidden', {value: %s, configurable: true});"
    " document.dispatchEvent(new Event('visibilitychange'))"
)


def test_rack_and_cooling_pages_follow_by_push_and_say_when_not_live(
    tmp_path: Path, browser: Any
) -> None:
    with server_with_ops(tmp_path / "srv", racks=2) as server:
        page, node_id = live_rack_page(browser, server, "A01", "gpu-a01-01")
        assert page.locator("#live-status").inner_text() == "live"
        page.evaluate("window.__reloaded = false")
        page.focus("#loop-link")
        token = enroll(server, "node:gpu-a01-01")
        batch = gpu_batch(
            "gpu-a01-01",
            1,
            temp_gpu_c=91,
            power_w=300,
            clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN,
        )
        batch["gpu_info"] = [
            {"gpu": i, "model": "NVIDIA H200", "limits": {"slowdown_c": 87}} for i in range(8)
        ]
        assert post_json(server.url + "/api/v1/ingest", batch, token)[0] == 200
        first_gpu = page.locator(f"#node-{node_id} .gpu").first
        page.wait_for_function(
            "el => el.textContent.includes('4 °C past slowdown')",
            arg=first_gpu.element_handle(),
            timeout=PUSH_MS,
        )
        assert "hw_thermal: " in first_gpu.inner_text()
        assert first_gpu.get_attribute("data-level") == "crit"
        assert page.evaluate("window.__reloaded") is False  # pushed, not reloaded
        assert page.evaluate("document.activeElement.id") == "loop-link"
        shot(page, tmp_path / "rack-live.png")

        # A tab left hidden lets its socket go, and takes it back when shown again.
        page.evaluate("FleetLive.setHiddenPause(0.2)")
        before = float(page.evaluate("document.body.dataset.lastUpdate"))
        page.evaluate(HIDE % "true")
        page.wait_for_selector("#live-status[data-state='paused']", timeout=PUSH_MS)
        assert page.locator("#live-status").inner_text() == "paused while the tab is hidden"
        page.evaluate(HIDE % "false")
        page.wait_for_selector("#live-status[data-state='live']", timeout=PUSH_MS)
        page.wait_for_function(
            f"Number(document.body.dataset.lastUpdate) > {before}", timeout=PUSH_MS
        )

        page.click("#loop-link")
        page.wait_for_selector("#live-status[data-state='live']")
        page.evaluate("window.__reloaded = false")
        cdu = page.locator(".loop").first
        assert "pump(s) failed" not in cdu.inner_text()
        site = enroll(server, "site:demo")
        failed = {
            "ts": time.time(),
            "loop": "CDU-1",
            "supply_c": 31.0,
            "return_c": 31.5,
            "flow_lpm": 0.0,
            "pumps_running": 0,
            "pumps_failed": 3,
        }
        loop_batch = {"protocol": 1, "source": "site:demo", "seq": 1, "loop": [failed]}
        assert post_json(server.url + "/api/v1/ingest", loop_batch, site)[0] == 200
        page.wait_for_function(
            "el => el.textContent.includes('3 pump(s) failed')",
            arg=cdu.element_handle(),
            timeout=PUSH_MS,
        )
        assert "no pump running" in cdu.inner_text()
        assert cdu.get_attribute("data-level") == "crit"
        shot(page, tmp_path / "cooling-live.png")

        # The server goes away: the page says so in words and keeps its time; when the
        # server is back the socket returns by itself and pushes resume.
        as_of = page.locator("#as-of").inner_text()
        server.kill()
        page.wait_for_selector("#live-status[data-state='down']", timeout=PUSH_MS)
        assert page.locator("#live-status").inner_text().startswith("reconnecting in")
        assert page.evaluate("document.body.dataset.live") == "down"
        # Screen readers hear the change once, not the countdown every second.
        assert page.get_attribute("#live-status", "aria-live") is None
        said = page.locator("#live-status + .sr[role=status]")
        assert said.inner_text() == "connection lost, reconnecting"
        assert page.locator("#as-of").inner_text() == as_of
        server.start()
        page.wait_for_selector("#live-status[data-state='live']", timeout=3 * PUSH_MS)
        mended = {**failed, "ts": time.time(), "flow_lpm": 600.0, "pumps_failed": 0}
        mended |= {"pumps_running": 3, "supply_c": 25.0, "return_c": 35.0}
        loop_batch = {"protocol": 1, "source": "site:demo", "seq": 2, "loop": [mended]}
        assert post_json(server.url + "/api/v1/ingest", loop_batch, site)[0] == 200
        page.wait_for_function(
            "el => !el.textContent.includes('pump(s) failed')",
            arg=cdu.element_handle(),
            timeout=PUSH_MS,
        )
        assert page.evaluate("window.__reloaded") is False
