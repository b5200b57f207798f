"""A GPU that falls off the bus is critical "lost" on the fleet, rack and GPU pages, in a
real browser against a real server, its data stored through the production ingest path
(the server's ingest child → `fleet.storage.samples.write_samples`): its node keeps
reporting and one GPU stops, with the driver's XID 79. A node that stops entirely shows
"no data", not lost (issue 18)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.browser_pages import login, server_with_ops
from tests.support.server import FleetServer

pytestmark = pytest.mark.browser

WAIT_MS = 15_000  # a bound on a hang, not a timing assertion
LOST_INDEX = 3


def node_sample(ts: float) -> dict[str, Any]:
    return {"ts": ts, "cpu_pct": 12.0, "power_w": 4200.0, "temp_inlet_c": 24.0}


def send(server: FleetServer, token: str, batch: dict[str, Any]) -> None:
    status, body = post_json(server.url + "/api/v1/ingest", batch, token)
    assert status == 200, body


def test_a_gpu_off_the_bus_is_critical_lost_and_a_silent_node_is_no_data(
    tmp_path: Path, browser: Any
) -> None:
    with server_with_ops(tmp_path / "srv", racks=2) as server:
        now = time.time()
        lost_at = now - 50
        # gpu-a01-01: every GPU reports, then GPU 3 falls off the bus; the node goes on.
        token = enroll(server, "node:gpu-a01-01")
        send(server, token, gpu_batch("gpu-a01-01", 1, ts=now - 60))
        on_the_bus = gpu_batch("gpu-a01-01", 2, ts=now, temp_gpu_c=61)
        on_the_bus["gpu"] = [g for g in on_the_bus["gpu"] if g["gpu"] != LOST_INDEX]
        on_the_bus["node"] = [node_sample(now)]
        on_the_bus["events"] = [
            {"ts": lost_at, "gpu": LOST_INDEX, "kind": "xid", "code": 79, "detail": "fell off"},
            {"ts": lost_at, "gpu": LOST_INDEX, "kind": "gpu_lost", "detail": "GPU 3 is lost"},
        ]
        send(server, token, on_the_bus)
        # gpu-a02-01: node and GPUs stopped together a minute ago: no data, not lost.
        quiet = enroll(server, "node:gpu-a02-01")
        batch = gpu_batch("gpu-a02-01", 1, ts=now - 60)
        batch["node"] = [node_sample(now - 60)]
        send(server, quiet, batch)

        a01, a02 = (
            server.query(f"SELECT id FROM fleet_rack WHERE name = '{name}'")[0][0]
            for name in ("A01", "A02")
        )
        node_id = server.query("SELECT id FROM fleet_node WHERE name = 'gpu-a01-01'")[0][0]
        gpu_pk = server.query(
            f'SELECT id FROM fleet_gpu WHERE node_id = {node_id} AND "index" = {LOST_INDEX}'
        )[0][0]
        when = time.strftime("%H:%M", time.gmtime(lost_at)) + " UTC"
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        login(page, server)

        # Fleet overview: A01 critical, "1 GPU lost"; A02 no data; the strip counts 1.
        tile = page.locator(f"#rack-{a01}")
        page.wait_for_function(
            "el => el.dataset.level === 'crit' && el.textContent.includes('1 GPU lost')",
            arg=tile.element_handle(),
            timeout=WAIT_MS,
        )
        assert tile.locator("[data-field='mode-word']").text_content() == "Critical"
        assert page.locator(f"#rack-{a02}").get_attribute("data-level") == "unknown"
        assert "no data" in page.locator(f"#rack-{a02}").inner_text().lower()
        assert page.locator(".site-strip [data-field='lost']").first.inner_text() == "1"
        assert page.locator(".site-strip [data-field='lost']").first.get_attribute(
            "data-level"
        ) == ("crit")

        # Rack page: the GPU's tile is critical and says since when and why.
        page.goto(f"{server.url}/racks/{a01}/")
        gpu_tile = page.locator(f"#node-{node_id} .gpu[data-gpu='{LOST_INDEX}']")
        assert gpu_tile.get_attribute("data-level") == "crit"
        assert gpu_tile.locator(".level-word").first.text_content() == "Critical"
        assert f"off the bus since {when} (XID 79)" in gpu_tile.inner_text()
        assert "1 GPU lost" in page.locator("#rack-level").inner_text()
        sibling = page.locator(f"#node-{node_id} .gpu[data-gpu='0']")
        assert sibling.get_attribute("data-level") != "crit" and "61 °C" in sibling.inner_text()

        # GPU page.
        page.goto(f"{server.url}/gpus/{gpu_pk}/")
        level = page.locator("#gpu-level")
        assert level.get_attribute("data-level") == "crit"
        assert level.locator(".level-word").text_content() == "Critical"
        assert f"off the bus since {when} (XID 79)" in page.locator("#gpu-lost").inner_text()

        # The node that stopped entirely: its GPUs are "No data", never lost.
        quiet_node = server.query("SELECT id FROM fleet_node WHERE name = 'gpu-a02-01'")[0][0]
        page.goto(f"{server.url}/racks/{a02}/")
        quiet_tile = page.locator(f"#node-{quiet_node} .gpu[data-gpu='0']")
        assert quiet_tile.get_attribute("data-level") == "unknown"
        assert quiet_tile.get_attribute("data-lost") is None
        assert "no data for" in quiet_tile.inner_text()
