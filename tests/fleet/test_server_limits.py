"""The server's connection limits (issue 11): uvicorn as documented caps WebSocket
messages just above the protocol's 1 MiB, and the demo, the tests and the docs run it
with the same options."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from agents.protocol import MAX_BATCH_BYTES
from fleetwatch.cli import COMMANDS, _parser
from fleetwatch.serve import UVICORN_LIMITS, WS_MAX_SIZE
from tests.support.agent import enroll
from tests.support.server import FleetServer

ROOT = Path(__file__).resolve().parents[2]


def test_the_documented_server_command_runs_with_the_limits() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith("fleetwatch serve"))
    args = _parser().parse_args(line.split("#")[0].split()[1:])
    assert " ".join(UVICORN_LIMITS) in " ".join(COMMANDS["serve"](args))
    assert MAX_BATCH_BYTES < WS_MAX_SIZE <= MAX_BATCH_BYTES + 128 * 1024


def _ws(server: FleetServer, token: str):  # type: ignore[no-untyped-def]
    return connect(
        server.ws_url + "/ws/ingest/v1",
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=10,
        max_size=None,
    )


def test_a_2_mib_websocket_frame_is_refused_at_once(fleet_server: FleetServer) -> None:
    token = enroll(fleet_server, "node:gpu-a03-01")
    with _ws(fleet_server, token) as ws:
        started = time.monotonic()
        ws.send("x" * (2 << 20))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert time.monotonic() - started < 3
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


def test_a_frame_between_the_protocol_limit_and_the_cap_is_a_413_nack(
    fleet_server: FleetServer,
) -> None:
    token = enroll(fleet_server, "node:gpu-a03-02")
    with _ws(fleet_server, token) as ws:
        ws.send("x" * (MAX_BATCH_BYTES + 1000))
        nack = json.loads(ws.recv(timeout=10))
    assert nack["error"]["code"] == 413
