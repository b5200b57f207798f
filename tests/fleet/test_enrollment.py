"""Enrolment: a site token buys a source its own token."""

from __future__ import annotations

from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.server import FleetServer


def test_enrolment_with_a_bad_token_is_refused_with_401(fleet_server: FleetServer) -> None:
    status, body = post_json(
        fleet_server.url + "/api/v1/enroll",
        {"enroll_token": "fwe_wrong", "source": "node:gpu-a01-11"},
    )
    assert status == 401
    assert "enrolment token" in body["error"]["reason"]


def test_enrolling_a_node_missing_from_inventory_says_so(fleet_server: FleetServer) -> None:
    status, body = post_json(
        fleet_server.url + "/api/v1/enroll",
        {"enroll_token": fleet_server.enroll_token, "source": "node:not-racked"},
    )
    assert status == 404
    assert "not in site" in body["error"]["reason"]


def test_re_enrolment_revokes_the_previous_token(fleet_server: FleetServer) -> None:
    first = enroll(fleet_server, "node:gpu-a01-12")
    second = enroll(fleet_server, "node:gpu-a01-12")
    url = fleet_server.url + "/api/v1/ingest"
    assert post_json(url, gpu_batch("gpu-a01-12", 1), first)[0] == 401
    assert post_json(url, gpu_batch("gpu-a01-12", 1), second)[0] == 200


def test_tokens_are_stored_hashed(fleet_server: FleetServer) -> None:
    token = enroll(fleet_server, "node:gpu-a01-13")
    stored = fleet_server.query(
        "SELECT token_hash FROM fleet_sourcetoken WHERE source = ?", ("node:gpu-a01-13",)
    )
    import hashlib

    assert stored == [(hashlib.sha256(token.encode()).hexdigest(),)]


def test_inventory_needs_the_enrolment_token(fleet_server: FleetServer) -> None:
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        fleet_server.url + "/api/v1/inventory",
        headers={"Authorization": f"Bearer {fleet_server.enroll_token}"},
    )
    with urllib.request.urlopen(request) as response:
        inventory = json.loads(response.read())
    assert inventory["site"]["slug"] == "demo"
    assert {r["name"] for r in inventory["racks"]} == {"A01", "A02"}
    try:
        urllib.request.urlopen(fleet_server.url + "/api/v1/inventory")
    except urllib.error.HTTPError as exc:
        assert exc.code == 401
    else:
        raise AssertionError("inventory answered without a token")


def test_re_enrolment_closes_a_connection_still_using_the_old_token(
    fleet_server: FleetServer,
) -> None:
    import json

    import pytest
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    old = enroll(fleet_server, "node:gpu-a01-14")
    with connect(
        fleet_server.ws_url + "/ws/ingest/v1",
        additional_headers={"Authorization": f"Bearer {old}"},
    ) as ws:
        ws.send(json.dumps(gpu_batch("gpu-a01-14", 1)))
        assert json.loads(ws.recv(timeout=10))["ack"] == 1
        enroll(fleet_server, "node:gpu-a01-14")  # the node was re-imaged and enrolled again
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401


def test_a_site_source_token_reads_its_sites_inventory_but_a_node_token_does_not(
    fleet_server: FleetServer,
) -> None:
    import json
    import urllib.error
    import urllib.request

    def get(token: str) -> tuple[int, dict[str, object]]:
        request = urllib.request.Request(
            fleet_server.url + "/api/v1/inventory", headers={"Authorization": f"Bearer {token}"}
        )
        try:
            with urllib.request.urlopen(request) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, {}

    status, body = get(enroll(fleet_server, "site:demo"))
    assert status == 200 and body["site"] == {"slug": "demo", "name": "Demo datacentre"}
    assert get(enroll(fleet_server, "node:gpu-a01-15"))[0] == 401
