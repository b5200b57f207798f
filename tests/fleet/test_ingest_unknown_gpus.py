"""A node's samples are stored only for GPUs its inventory has, or that an admin accepted
from discovery (issue 19: a black-box run stored raw series for GPU indexes 8–1023 of an
8-GPU node). The rest of the batch is acknowledged and stored; the unknown GPUs' part is
refused in the ack, naming the index, and counted for the admin. Over real HTTP and
WebSocket, on every tier."""

from __future__ import annotations

import json
import time
from typing import Any

from websockets.sync.client import connect

from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.server import FleetServer


def stored(server: FleetServer, node: str, where: str = "1=1") -> int:
    node_is = "node_id = (SELECT id FROM fleet_node WHERE name = ?)"
    return server.count("gpu", f"{node_is} AND {where}", (node,))


def post(server: FleetServer, token: str, batch: dict[str, Any]) -> dict[str, Any]:
    status, body = post_json(server.url + "/api/v1/ingest", batch, token)
    assert status == 200, body
    return body


def writer_tally(server: FleetServer, node: str) -> tuple[int, str]:
    rows = server.query(
        "SELECT count, last_reason FROM fleet_rejectiontally"
        " WHERE source = ? AND transport = 'ingest writer' AND field = 'gpu'",
        (f"node:{node}",),
    )
    return (int(rows[0][0]), str(rows[0][1])) if rows else (0, "")


def test_a_gpu_index_the_node_inventory_lacks_is_refused_naming_it_and_not_stored(
    fleet_server: FleetServer,
) -> None:
    node = "gpu-a06-01"  # 8 GPUs in the inventory: 0–7
    token = enroll(fleet_server, f"node:{node}")
    batch = gpu_batch(node, 1, ts=time.time() - 2, gpus=9)
    answer = post(fleet_server, token, batch)
    assert answer["ack"] == 1
    assert answer["refused"] == {
        "code": 400,
        "field": "gpu[8].gpu",
        "reason": f"GPU 8 is not in the inventory of node {node}: 1 sample not stored"
        " (add it to the inventory, or accept it in the admin: GPUs, awaiting acceptance)",
    }
    assert stored(fleet_server, node, "gpu = 8") == 0
    assert stored(fleet_server, node) == 8  # the node's own GPUs keep flowing
    assert writer_tally(fleet_server, node)[0] == 1


def test_a_batch_of_1016_unknown_gpu_indexes_stores_none_of_them(
    fleet_server: FleetServer,
) -> None:
    """The black-box run's batch: GPU indexes 8–1023 on an 8-GPU node."""
    node = "gpu-a06-02"
    token = enroll(fleet_server, f"node:{node}")
    batch = gpu_batch(node, 1, ts=time.time() - 2, gpus=1024)
    batch["events"] = [{"ts": time.time() - 2, "gpu": 900, "kind": "xid", "code": 79}]
    answer = post(fleet_server, token, batch)
    assert answer["refused"]["field"] == "gpu[8].gpu"
    reason = answer["refused"]["reason"]
    assert reason.startswith("GPUs 8, 9, 10, 11, … (1,016: 8–1023) are not in the inventory")
    assert "1,016 samples and 1 event not stored" in reason
    assert stored(fleet_server, node, "gpu >= 8") == 0
    assert stored(fleet_server, node) == 8
    events = fleet_server.query(
        "SELECT count(*) FROM fleet_event WHERE source = ?", (f"node:{node}",)
    )
    assert events[0][0] == 0
    assert "1,016: 8–1023" in writer_tally(fleet_server, node)[1]


def test_an_event_naming_an_unknown_gpu_is_refused_over_websocket(
    fleet_server: FleetServer,
) -> None:
    node = "gpu-a06-03"
    token = enroll(fleet_server, f"node:{node}")
    batch = gpu_batch(node, 1, ts=time.time() - 2)
    ts = time.time() - 2
    batch["events"] = [
        {"ts": ts, "gpu": 3, "kind": "xid", "code": 79},
        {"ts": ts, "gpu": 12, "kind": "xid", "code": 79},
    ]
    with connect(
        fleet_server.ws_url + "/ws/ingest/v1",
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=10,
    ) as ws:
        ws.send(json.dumps(batch))
        answer = json.loads(ws.recv(timeout=10))
    assert answer["ack"] == 1 and answer["refused"]["field"] == "events[1].gpu"
    assert "GPU 12 is not in the inventory" in answer["refused"]["reason"]
    kept = fleet_server.query(
        "SELECT gpu_index FROM fleet_event WHERE source = ?", (f"node:{node}",)
    )
    assert kept == [(3,)]
    assert stored(fleet_server, node) == 8


def test_a_discovered_gpu_stores_samples_once_an_admin_accepts_it(
    fleet_server: FleetServer,
) -> None:
    """The node gained a GPU: its agent describes it (the GPU is discovered) and sends its
    samples; the node's other GPUs keep flowing, the new one's once it is accepted."""
    node = "gpu-a06-04"
    token = enroll(fleet_server, f"node:{node}")
    batch = gpu_batch(node, 1, ts=time.time() - 30, gpus=9)
    batch["gpu_info"] = [{"gpu": 8, "model": "NVIDIA H200", "uuid": "GPU-new"}]
    assert post(fleet_server, token, batch)["refused"]["field"] == "gpu[8].gpu"
    assert stored(fleet_server, node, "gpu = 8") == 0
    fleet_server.execute(
        "UPDATE fleet_gpu SET accepted_at = ?, accepted_by = 'ops'"
        ' WHERE "index" = 8 AND node_id = (SELECT id FROM fleet_node WHERE name = ?)',
        (time.strftime("%Y-%m-%d %H:%M:%S+00:00", time.gmtime()), node),
    )
    deadline = time.monotonic() + 15
    seq = 2
    while True:  # the writer rechecks the node's GPUs within seconds of a miss
        answer = post(fleet_server, token, gpu_batch(node, seq, ts=time.time() - 30 + seq, gpus=9))
        if "refused" not in answer:
            break
        assert time.monotonic() < deadline, answer
        seq += 1
        time.sleep(0.5)
    assert stored(fleet_server, node, "gpu = 8") == 1
