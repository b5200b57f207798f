"""The agent endpoints refuse a body that is not JSON (415) before reading it, and a
client that keeps failing token checks (429 with Retry-After) before checking more."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from websockets.exceptions import ConnectionClosed

from fleet.ingest.guard import WINDOW_S, AuthFailures, is_json_content_type
from tests.support.agent import enroll, gpu_batch, post_json, ws_connect
from tests.support.server import FleetServer

FAILURES_ALLOWED = 3


@pytest.fixture(scope="module")
def guarded_server(tier: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetServer]:
    env = {"FLEETWATCH_AUTH_FAILURES_PER_MIN": str(FAILURES_ALLOWED)}
    with FleetServer.started(
        tmp_path_factory.mktemp(f"guard-{tier}"), tier=tier, extra_env=env
    ) as server:
        yield server


def _lower(items: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in items}


def post(url: str, data: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, _lower(response.headers.items()), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _lower(exc.headers.items()), json.loads(exc.read())


def test_a_form_encoded_enrolment_is_415_and_enrols_nothing(guarded_server: FleetServer) -> None:
    body = json.dumps({"enroll_token": guarded_server.enroll_token, "source": "node:gpu-a01-01"})
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    before = guarded_server.query("SELECT count(*) FROM fleet_sourcetoken")[0][0]
    status, headers, answer = post(guarded_server.url + "/api/v1/enroll", body.encode(), form)
    assert status == 415
    assert headers["accept-post"] == "application/json"
    assert answer["error"]["field"] == "content-type"
    assert guarded_server.query("SELECT count(*) FROM fleet_sourcetoken")[0][0] == before


def test_a_text_plain_batch_is_415_and_stores_nothing(guarded_server: FleetServer) -> None:
    token = enroll(guarded_server, "node:gpu-a01-02")
    batch = json.dumps(gpu_batch("gpu-a01-02", 1)).encode()
    headers = {"Content-Type": "text/plain", "Authorization": f"Bearer {token}"}
    status, _, answer = post(guarded_server.url + "/api/v1/ingest", batch, headers)
    assert status == 415, answer
    assert guarded_server.query("SELECT count(*) FROM fw_gpu_raw")[0][0] == 0
    # The same batch as JSON (with a charset) is taken.
    headers["Content-Type"] = "application/json; charset=utf-8"
    status, _, answer = post(guarded_server.url + "/api/v1/ingest", batch, headers)
    assert status == 200, answer


def test_a_client_guessing_tokens_is_answered_429_until_a_minute_passes(
    guarded_server: FleetServer,
) -> None:
    url = guarded_server.url + "/api/v1/ingest"
    batch = gpu_batch("gpu-a01-03", 1)
    for _ in range(FAILURES_ALLOWED):
        assert post_json(url, batch, "fws_guess")[0] == 401
    status, headers, answer = post(
        url,
        json.dumps(batch).encode(),
        {"Content-Type": "application/json", "Authorization": "Bearer fws_guess"},
    )
    assert status == 429, answer
    assert 1 <= int(headers["retry-after"]) <= WINDOW_S
    assert answer["error"]["field"] == "authorization"
    assert "too many failed token checks" in answer["error"]["reason"]
    # Enrolment from the same client is held back too, before its token is looked at.
    status, _ = post_json(
        guarded_server.url + "/api/v1/enroll",
        {"enroll_token": guarded_server.enroll_token, "source": "node:gpu-a01-04"},
    )
    assert status == 429
    # And the WebSocket: closed "try again later" (1013) before its token is looked at.
    with ws_connect(guarded_server, "fws_guess") as ws, pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013


@pytest.mark.parametrize(
    ("content_type", "taken"),
    [
        ("", True),
        ("application/json", True),
        ("Application/JSON; charset=utf-8", True),
        ("application/vnd.fleetwatch+json", True),
        ("text/plain", False),
        ("multipart/form-data; boundary=x", False),
        ("application/x-www-form-urlencoded", False),
    ],
)
def test_json_content_types_are_taken_and_others_refused(content_type: str, taken: bool) -> None:
    assert is_json_content_type({"CONTENT_TYPE": content_type}) is taken


@override_settings(AUTH_FAILURES_PER_MIN=2)
def test_failures_older_than_a_minute_no_longer_count() -> None:
    failures = AuthFailures()
    failures.note("10.0.0.9", 100.0)
    failures.note("10.0.0.9", 130.0)
    assert failures.retry_after_s("10.0.0.9", 131.0) == 29  # the first ages out at 160
    assert failures.retry_after_s("10.0.0.7", 131.0) == 0  # another client is not held
    assert failures.retry_after_s("10.0.0.9", 160.5) == 0
