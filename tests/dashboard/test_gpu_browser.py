"""The node and GPU pages in a real browser: drill from the rack page to a node and on to
one of its GPUs. Both follow new samples without a reload; the GPU page draws its Plotly
history from the history API and appends a new sample to the chart."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from agents.protocol import reasons as nvml
from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.browser_pages import login, server_with_ops, shot
from tests.support.server import FleetServer

pytestmark = pytest.mark.browser


NODE = "gpu-a01-01"
LIMITS = {"slowdown_c": 87, "shutdown_c": 92, "gpu_max_c": 85, "power_limit_max_w": 700}


def feed_history(server: FleetServer, token: str, now: float) -> int:
    """Two minutes of samples, one batch per 10 s, warming up; returns the next seq."""
    url = server.url + "/api/v1/ingest"
    for seq, age in enumerate(range(120, -1, -10), start=1):
        held = {"clock_event_reasons": nvml.SW_POWER_CAP} if age <= 40 else {}  # the last 40 s
        batch = gpu_batch(NODE, seq, ts=now - age, temp_gpu_c=60 + (120 - age) / 10, **held)
        host = {"cpu_pct": 40.0, "temp_inlet_c": 24.0, "power_w": 9_000.0}
        batch["node"] = [{"ts": now - age, **host}]
        if seq == 1:  # the agent describes its GPUs once: each one's own limits
            batch["gpu_info"] = [
                {"gpu": i, "model": "NVIDIA H200", "limits": LIMITS} for i in range(8)
            ]
        assert post_json(url, batch, token)[0] == 200
    return seq + 1


def test_rack_to_node_to_gpu_draws_the_history_and_appends_live_points(
    tmp_path: Path, browser: Any
) -> None:
    with server_with_ops(tmp_path / "srv", racks=1) as server:
        token = enroll(server, f"node:{NODE}")
        seq = feed_history(server, token, time.time())
        sql = "SELECT rack_id, id FROM fleet_node WHERE name = ?"
        rack_id, node_id = server.query(sql, (NODE,))[0]
        gpu_pk = server.query(
            'SELECT id FROM fleet_gpu WHERE node_id = ? AND "index" = 0', (node_id,)
        )[0][0]
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        login(page, server)
        page.goto(f"{server.url}/racks/{rack_id}/")
        page.wait_for_selector("h1:has-text('Rack A01')")
        page.click(f"a.node-name[href='/nodes/{node_id}/']")
        page.wait_for_selector(f"h1:has-text('{NODE}')")
        assert page.locator("a.gpu-link").count() == 8
        assert "°C" in page.locator("#node-gpus").inner_text()
        assert "Inlet air\n24.0 °C" in page.locator("#node-host").inner_text()
        page.wait_for_selector("body[data-charts='drawn']")
        temps = page.locator("#node-chart-temps.js-plotly-plot .scatterlayer path.js-line")
        assert temps.count() == 1  # the host reports its inlet only: one line
        shot(page, tmp_path / "node.png")
        # the node page follows its rack's pushes without a reload
        page.evaluate("window.__stayed = true")
        page.wait_for_selector("#live-status[data-state='live']")
        batch = gpu_batch(NODE, seq, temp_gpu_c=66)
        assert post_json(server.url + "/api/v1/ingest", batch, token)[0] == 200
        page.wait_for_selector("#node-gpus:has-text('66 °C')", timeout=15_000)
        assert page.evaluate("window.__stayed === true")
        seq += 1

        page.click(f"a.gpu-link[href='/gpus/{gpu_pk}/']")
        page.wait_for_selector("h1:has-text('GPU 0')")
        page.wait_for_selector("body[data-charts='drawn']")
        chart = page.locator("#chart-temp.js-plotly-plot")
        assert chart.count() == 1
        line = chart.locator("path.js-line").first
        assert len(line.get_attribute("d") or "") > 20  # a drawn line, not an empty path
        # it says what answered: no rollup runs in this test, so the raw samples did
        assert "from raw samples" in page.locator("#chart-status").inner_text()
        figures = page.locator("#gpu-figures").inner_text()
        assert "slowdown 87 °C" in figures and "cap 700 W" in figures
        # the GPU's own limits are drawn on its temperature chart, named in words
        assert "slowdown 87 °C" in chart.locator(".annotation-text").all_text_contents()
        # the power cap held the clocks for the last 40 s: a row of the reasons timeline
        reasons = page.locator("#chart-reasons.js-plotly-plot")
        assert "power_cap" in reasons.locator(".ytick text").all_text_contents()
        assert "power_cap: clocks reduced" in page.locator("#gpu-timeline").inner_text()
        # bucketed: the bucket maxima are drawn too, so a mean cannot hide a spike
        assert "GPU, max per bucket" in chart.locator(".legendtext").all_text_contents()
        shot(page, tmp_path / "gpu.png")

        before = page.evaluate("document.getElementById('chart-temp').data[0].x.length")
        page.wait_for_selector("#live-status[data-state='live']")
        batch = gpu_batch(NODE, seq, temp_gpu_c=75)
        assert post_json(server.url + "/api/v1/ingest", batch, token)[0] == 200
        page.wait_for_function(
            f"document.getElementById('chart-temp').data[0].x.length > {before}",
            timeout=15_000,
        )
        page.wait_for_selector("#gpu-figures:has-text('75 °C')", timeout=15_000)

        # the other theme: the charts take its colours too
        before_theme = page.evaluate("document.documentElement.dataset.theme || ''")
        page.click("#theme-toggle")
        page.wait_for_function(
            "getComputedStyle(document.documentElement).getPropertyValue('--text').trim()"
            " === document.getElementById('chart-temp').layout.font.color"
        )
        assert page.evaluate("document.documentElement.dataset.theme") != before_theme
        shot(page, tmp_path / "gpu-other-theme.png")
