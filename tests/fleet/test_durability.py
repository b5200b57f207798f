"""A restart loses nothing that was acknowledged; a dead writer is replaced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.server import FleetServer


def writer_pids(server: FleetServer) -> list[int]:
    assert server.proc is not None
    out = subprocess.run(
        ["pgrep", "-P", str(server.proc.pid), "-f", "fleet.ingest.child"],
        capture_output=True,
        text=True,
    )
    return [int(p) for p in out.stdout.split()]


def test_every_acknowledged_batch_survives_a_server_crash(fresh_server: FleetServer) -> None:
    node = "gpu-a01-01"
    token = enroll(fresh_server, f"node:{node}")
    acked = []
    with connect(
        fresh_server.ws_url + "/ws/ingest/v1",
        additional_headers={"Authorization": f"Bearer {token}"},
    ) as ws:
        for seq in range(1, 41):
            ws.send(json.dumps(gpu_batch(node, seq, ts=time.time() - 100 + seq)))
        for _ in range(40):
            acked.append(json.loads(ws.recv(timeout=10))["ack"])
        fresh_server.kill()  # SIGKILL right after the last ack: no graceful shutdown
    fresh_server.start()
    stored = fresh_server.count(
        "gpu", "node_id = (SELECT id FROM fleet_node WHERE name = ?)", (node,)
    )
    assert sorted(acked) == list(range(1, 41))
    assert stored == 40 * 8


def test_a_dead_writer_closes_agent_connections_and_a_new_one_takes_over(
    fresh_server: FleetServer,
) -> None:
    node = "gpu-a01-02"
    token = enroll(fresh_server, f"node:{node}")
    headers = {"Authorization": f"Bearer {token}"}
    with connect(fresh_server.ws_url + "/ws/ingest/v1", additional_headers=headers) as ws:
        ws.send(json.dumps(gpu_batch(node, 1)))
        assert json.loads(ws.recv(timeout=10))["ack"] == 1
        (pid,) = writer_pids(fresh_server)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    # The agent reconnects and resends what was not acknowledged.
    status, body = post_json(fresh_server.url + "/api/v1/ingest", gpu_batch(node, 2), token)
    assert (status, body["ack"]) == (200, 2)
    assert len(writer_pids(fresh_server)) == 1
