"""The rack page's live socket on a real server, on both tiers (PostgreSQL and the Redis
channel layer on `services`): a batch an agent sends reaches the page as its new HTML
through the publisher, the signal group and the page renderer."""

from __future__ import annotations

import json
import time

from agents.protocol import reasons as nvml
from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.live import create_ops_user, login_cookie
from tests.support.server import FleetServer

WAIT_S = 15.0  # a bound on a hang, not a timing assertion


def test_an_agents_batch_reaches_the_open_rack_page_as_its_new_html(
    fleet_server: FleetServer,
) -> None:
    from websockets.sync.client import connect

    create_ops_user(fleet_server)
    rack_id = fleet_server.query("SELECT id FROM fleet_rack WHERE name = 'A02'")[0][0]
    headers = {"Cookie": login_cookie(fleet_server), "Origin": fleet_server.url}
    path = f"{fleet_server.ws_url}/ws/live/rack/{rack_id}/page"
    with connect(path, additional_headers=headers) as page:
        first = json.loads(page.recv(timeout=WAIT_S))  # rendered for it as it joins
        assert "past slowdown" not in first["html"]
        token = enroll(fleet_server, "node:gpu-a02-01")
        batch = gpu_batch(
            "gpu-a02-01", 1, temp_gpu_c=91, clock_event_reasons=nvml.HW_THERMAL_SLOWDOWN
        )
        batch["gpu_info"] = [{"gpu": i, "limits": {"slowdown_c": 87}} for i in range(8)]
        assert post_json(fleet_server.url + "/api/v1/ingest", batch, token)[0] == 200
        deadline = time.monotonic() + WAIT_S
        html = ""
        while "4 °C past slowdown" not in html and time.monotonic() < deadline:
            html = json.loads(page.recv(timeout=WAIT_S))["html"]
        assert "4 °C past slowdown" in html and "hw_thermal: " in html
