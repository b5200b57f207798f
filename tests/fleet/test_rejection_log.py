"""Refusals are logged with the client's address and the source attempted (issue 11), so
an operator can tell a misconfigured agent from an attack: HTTP and WebSocket ingest and
enrolment, on both tiers."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from fleet.ingest import rejections
from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.server import FleetServer


def log_line(server: FleetServer, *needles: str, timeout: float = 10) -> str:
    """The first `rejected` line of the server log holding every needle."""
    deadline = time.monotonic() + timeout
    while True:
        for line in server.log_path.read_text(errors="replace").splitlines():
            if "rejected" in line and all(n in line for n in needles):
                return line
        if time.monotonic() > deadline:
            raise AssertionError(f"no rejection logged with {needles}")
        time.sleep(0.1)


def test_an_http_batch_refused_is_logged_with_address_and_source(
    fleet_server: FleetServer,
) -> None:
    token = enroll(fleet_server, "node:gpu-a03-01")
    batch = gpu_batch("gpu-a03-01", 1)
    batch["gpu"][0]["power_w"] = -5
    assert post_json(fleet_server.url + "/api/v1/ingest", batch, token)[0] == 400
    line = log_line(fleet_server, "HTTP ingest", "'node:gpu-a03-01'")
    assert "from 127.0.0.1" in line and "400 gpu[0].power_w" in line


def test_a_bad_token_is_logged_with_the_source_the_body_claims(fleet_server: FleetServer) -> None:
    batch = gpu_batch("gpu-a01-22", 1)
    assert post_json(fleet_server.url + "/api/v1/ingest", batch, "fwn_forged")[0] == 401
    line = log_line(fleet_server, "HTTP ingest", "'node:gpu-a01-22'")
    assert "from 127.0.0.1" in line and "401 authorization" in line


def test_a_refused_enrolment_is_logged_with_address_and_source(fleet_server: FleetServer) -> None:
    body = {"enroll_token": "fwe_guess", "source": "node:gpu-a01-23"}
    assert post_json(fleet_server.url + "/api/v1/enroll", body)[0] == 401
    line = log_line(fleet_server, "enrolment", "'node:gpu-a01-23'")
    assert "from 127.0.0.1" in line and "401 enroll_token" in line


def test_a_websocket_nack_is_logged_with_address_and_source(fleet_server: FleetServer) -> None:
    token = enroll(fleet_server, "node:gpu-a03-02")
    batch = gpu_batch("gpu-a03-02", 1)
    batch["gpu"][1]["bogus_w"] = 1
    with connect(
        fleet_server.ws_url + "/ws/ingest/v1",
        additional_headers={"Authorization": f"Bearer {token}", "X-Forwarded-For": "203.0.113.9"},
        open_timeout=10,
    ) as ws:
        ws.send(json.dumps(batch))
        assert "nack" in json.loads(ws.recv(timeout=10))
    line = log_line(fleet_server, "WebSocket ingest", "'node:gpu-a03-02'")
    # uvicorn trusts X-Forwarded-For from 127.0.0.1 (the proxy's place): the agent's address
    assert "from 203.0.113.9 source=" in line and "gpu[1].bogus_w" in line


def test_a_websocket_with_a_bad_token_is_logged_with_its_address(
    fleet_server: FleetServer,
) -> None:
    with (
        connect(
            fleet_server.ws_url + "/ws/ingest/v1",
            additional_headers={
                "Authorization": "Bearer fwn_forged",
                "X-Forwarded-For": "198.51.100.7",
            },
            open_timeout=10,
        ) as ws,
        pytest.raises(ConnectionClosed),
    ):
        ws.recv(timeout=10)
    line = log_line(fleet_server, "WebSocket ingest", "198.51.100.7")
    assert "401 authorization" in line


def test_a_flood_of_refusals_is_logged_at_most_so_often(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(rejections, "_budget", rejections._Budget())
    clock = [1000.0]
    monkeypatch.setattr(rejections, "_clock", lambda: clock[0])
    with caplog.at_level("WARNING", logger="fleet.ingest.rejections"):
        for _ in range(rejections.MAX_LINES + 500):
            rejections.log_rejection("HTTP ingest", "192.0.2.1", "node:x", 400, "$", "bad")
        assert len(caplog.records) == rejections.MAX_LINES
        clock[0] += rejections.WINDOW_S
        rejections.log_rejection("HTTP ingest", "192.0.2.1", "node:x", 400, "$", "bad")
    messages: list[Any] = [r.getMessage() for r in caplog.records[rejections.MAX_LINES :]]
    assert (
        messages[0] == f"500 more rejections in the last {rejections.WINDOW_S:g} s were not logged"
    )
    assert messages[1].startswith("rejected HTTP ingest from 192.0.2.1 source='node:x': 400 $")


def test_a_forwarded_header_from_an_untrusted_peer_is_shown_beside_the_address() -> None:
    meta = {"REMOTE_ADDR": "192.0.2.5", "HTTP_X_FORWARDED_FOR": "10.0.0.1"}
    assert rejections.client_from_meta(meta) == "192.0.2.5 (forwarded for '10.0.0.1')"
    scope = {"client": ("192.0.2.5", 4000), "headers": [(b"x-forwarded-for", b"192.0.2.5")]}
    assert rejections.client_from_scope(scope) == "192.0.2.5"


@pytest.mark.django_db
def test_refusals_are_counted_per_source_for_the_admin(admin_client: Any) -> None:
    from fleet.ingest.tally import Tally
    from fleet.models import RejectionTally

    counts = Tally()
    refusal = ("node:gpu-a01-01", "HTTP ingest", 400, "gpu[0].power_w")
    for _ in range(3):
        counts.add(*refusal, "-5 is below 0", "10.0.0.5")
    counts.add("", "enrolment", 401, "enroll_token", "unknown enrolment token", "10.0.0.9")
    assert counts.flush() == 2
    counts.add(*refusal, "-6 is below 0", "10.0.0.5")
    counts.flush()
    row = RejectionTally.objects.get(source="node:gpu-a01-01")
    assert row.count == 4 and row.last_reason == "-6 is below 0"
    page = admin_client.get("/admin/fleet/rejectiontally/").content.decode()
    assert "node:gpu-a01-01" in page and "gpu[0].power_w" in page
    assert "unknown" in page  # the enrolment with no source
