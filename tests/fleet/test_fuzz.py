"""Both ingest transports and the enrolment endpoint, fuzzed (issue 11), on both tiers:
for any generated body the answer is 2xx or 4xx, a 4xx changes nothing stored, and the
connection (or the next good batch) still works."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.support.agent import enroll, post_json
from tests.support.fuzz import batches, good_batch, json_values
from tests.support.server import FleetServer

NODE = "gpu-a03-04"
_seq = itertools.count(10**12)  # good batches' seqs, above any a fuzzed batch acks


def stored(server: FleetServer) -> int:
    return server.count("gpu", "node_id = (SELECT id FROM fleet_node WHERE name = ?)", (NODE,))


def token_for(server: FleetServer) -> str:
    cached = getattr(server, "_fuzz_token", None)
    if cached is None:
        cached = enroll(server, f"node:{NODE}")
        server._fuzz_token = cached  # type: ignore[attr-defined]
    return str(cached)


def encode(obj: Any) -> bytes:
    return json.dumps(obj).encode()  # stdlib: integers past 64 bits are sent as written


@given(body=batches(NODE))
def test_http_ingest_answers_any_body_with_2xx_or_4xx(fleet_server: FleetServer, body: Any) -> None:
    token = token_for(fleet_server)
    url = fleet_server.url + "/api/v1/ingest"
    before = stored(fleet_server)
    status, answer = post_json(url, encode(body), token)
    assert 200 <= status < 300 or 400 <= status < 500, (status, answer)
    if status >= 400:
        assert answer["error"]["code"] == status
        assert stored(fleet_server) == before
    status, answer = post_json(url, good_batch(NODE, next(_seq)), token)
    assert status == 200, answer


@given(body=batches(NODE))
def test_websocket_ingest_answers_any_body_and_the_connection_goes_on(
    fleet_server: FleetServer, body: Any
) -> None:
    token = token_for(fleet_server)
    before = stored(fleet_server)
    with connect(
        fleet_server.ws_url + "/ws/ingest/v1",
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=10,
    ) as ws:
        ws.send(encode(body).decode())
        try:
            answer = json.loads(ws.recv(timeout=10))
        except ConnectionClosed as closed:  # only a batch for another source closes it
            assert closed.rcvd is not None and closed.rcvd.code == 4403, closed
            assert stored(fleet_server) == before
            return
        if "nack" in answer:
            assert 400 <= answer["error"]["code"] < 500, answer
            assert stored(fleet_server) == before
        else:
            assert "ack" in answer
        ws.send(json.dumps(good_batch(NODE, next(_seq))))
        assert "ack" in json.loads(ws.recv(timeout=10))


enrolment_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "enroll_token": json_values | st.just("__real__"),
            "source": json_values
            | st.sampled_from(["node:", "node:gpu-a02-0\x00", "rack:demo/A01", "site:x", "x:y"]),
        },
    ),
)


@given(body=enrolment_bodies)
def test_enrolment_answers_any_body_with_2xx_or_4xx(fleet_server: FleetServer, body: Any) -> None:
    if isinstance(body, dict) and body.get("enroll_token") == "__real__":
        body["enroll_token"] = fleet_server.enroll_token
    tokens = fleet_server.query("SELECT COUNT(*), MAX(id) FROM fleet_sourcetoken")
    status, answer = post_json(fleet_server.url + "/api/v1/enroll", encode(body))
    assert 200 <= status < 300 or 400 <= status < 500, (status, answer)
    if status >= 400:
        assert answer["error"]["code"] == status and "field" in answer["error"]
        assert fleet_server.query("SELECT COUNT(*), MAX(id) FROM fleet_sourcetoken") == tokens
