"""Enrolment: a site token buys a source its own token."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.server import FleetServer


def test_enrolment_with_a_bad_token_is_refused_with_401(fleet_server: FleetServer) -> None:
    status, body = post_json(
        fleet_server.url + "/api/v1/enroll",
        {"enroll_token": "fwe_wrong", "source": "node:gpu-a03-01"},
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
    first = enroll(fleet_server, "node:gpu-a03-02")
    second = enroll(fleet_server, "node:gpu-a03-02")
    url = fleet_server.url + "/api/v1/ingest"
    assert post_json(url, gpu_batch("gpu-a03-02", 1), first)[0] == 401
    assert post_json(url, gpu_batch("gpu-a03-02", 1), second)[0] == 200


def test_tokens_are_stored_hashed(fleet_server: FleetServer) -> None:
    token = enroll(fleet_server, "node:gpu-a03-03")
    stored = fleet_server.query(
        "SELECT token_hash FROM fleet_sourcetoken WHERE source = ?", ("node:gpu-a03-03",)
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
    seeded = {name for (name,) in fleet_server.query("SELECT name FROM fleet_rack")}
    assert {r["name"] for r in inventory["racks"]} == seeded
    assert {"A01", "A02"} <= seeded
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

    old = enroll(fleet_server, "node:gpu-a03-04")
    with connect(
        fleet_server.ws_url + "/ws/ingest/v1",
        additional_headers={"Authorization": f"Bearer {old}"},
    ) as ws:
        ws.send(json.dumps(gpu_batch("gpu-a03-04", 1)))
        assert json.loads(ws.recv(timeout=10))["ack"] == 1
        enroll(fleet_server, "node:gpu-a03-04")  # the node was re-imaged and enrolled again
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
    assert get(enroll(fleet_server, "node:gpu-a04-01"))[0] == 401


def _request(url: str, method: str, data: bytes | None = None) -> tuple[int, dict[str, str], Any]:
    import json
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return (
                response.status,
                {k.lower(): v for k, v in response.headers.items()},
                json.loads(response.read()),
            )
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, json.loads(exc.read())


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"enroll_token": 123, "source": "node:gpu-a03-01"}, "enroll_token", "must be a string"),
        ({"enroll_token": ["x"], "source": "node:gpu-a03-01"}, "enroll_token", "got list"),
        ({"enroll_token": {"a": 1}, "source": "node:gpu-a03-01"}, "enroll_token", "got dict"),
        ({"enroll_token": "fwe_x", "source": 7}, "source", "required string"),
        ({"enroll_token": "fwe_x", "source": None}, "source", "required string"),
        ({"enroll_token": "fwe_x", "source": "node:gpu-a01\x00-11"}, "source", "NUL"),
        ({"enroll_token": "fwe_x", "source": "node:" + "a" * 300}, "source", "longer than"),
        ([1, 2], "$", "JSON object"),
        ("node:gpu-a03-01", "$", "JSON object"),
    ],
)
def test_enrolment_with_wrong_types_or_nul_is_a_400_naming_the_field(
    fleet_server: FleetServer, body: Any, field: str, reason: str
) -> None:
    """On both tiers: PostgreSQL refuses NUL in text, which answered 500 before."""
    status, payload = post_json(fleet_server.url + "/api/v1/enroll", body)
    assert status == 400, payload
    assert payload["error"]["field"] == field
    assert reason in payload["error"]["reason"]
    # A NUL with a good enrolment token reaches the database lookups: still a 400.
    status, payload = post_json(
        fleet_server.url + "/api/v1/enroll",
        {"enroll_token": fleet_server.enroll_token, "source": "node:gpu\x00-a01-11"},
    )
    assert status == 400 and payload["error"]["field"] == "source"


@pytest.mark.parametrize(
    ("path", "method", "allow"),
    [
        ("/api/v1/enroll", "GET", "POST"),
        ("/api/v1/enroll", "PUT", "POST"),
        ("/api/v1/enroll", "DELETE", "POST"),
        ("/api/v1/ingest", "GET", "POST"),
        ("/api/v1/ingest", "PATCH", "POST"),
        ("/api/v1/inventory", "POST", "GET, HEAD"),
    ],
)
def test_a_wrong_method_is_a_json_405_with_allow(
    fleet_server: FleetServer, path: str, method: str, allow: str
) -> None:
    data = b"{}" if method in ("PUT", "PATCH", "POST") else None
    status, headers, body = _request(fleet_server.url + path, method, data)
    assert status == 405
    assert headers["allow"] == allow
    assert headers["content-type"] == "application/json"
    assert body == {
        "error": {"code": 405, "field": "$", "reason": f"method not allowed: use {allow}"}
    }
