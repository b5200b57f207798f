"""The cadence a batch declares is kept with its source by the real ingest path (the
per-source statement the ingest child runs every save), on every tier; a bad one is
refused naming the field and stores nothing."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.server import FleetServer

SQL = (
    "SELECT sample_interval_s, batch_interval_s, last_seq FROM fleet_sourcetoken"
    " WHERE source = ? AND revoked = ?"
)


def send(server: FleetServer, node: str, token: str, seq: int, **extra: Any) -> tuple[int, Any]:
    batch = gpu_batch(node, seq, ts=time.time() - 5 + seq * 0.01, gpus=1) | extra
    return post_json(server.url + "/api/v1/ingest", batch, token)


def kept(server: FleetServer, node: str, seq: int) -> tuple[Any, Any]:
    """(sample_interval_s, batch_interval_s) once the source's row has `seq` saved."""
    deadline = time.monotonic() + 10
    while True:
        sample_s, batch_s, last_seq = server.query(SQL, (f"node:{node}", False))[0]
        if last_seq == seq or time.monotonic() > deadline:
            assert last_seq == seq, f"seq {seq} never saved with its source"
            return sample_s, batch_s
        time.sleep(0.05)


def test_each_source_keeps_the_cadence_it_declared(fleet_server: FleetServer) -> None:
    declared = {"gpu-a06-01": (1.0, 1.0), "gpu-a06-02": (5.0, 5.0), "gpu-a06-03": (1.0, 15.0)}
    for node, (sample_s, batch_s) in declared.items():
        token = enroll(fleet_server, f"node:{node}")
        cadence = {"sample_s": sample_s, "batch_s": batch_s}
        assert send(fleet_server, node, token, 1, cadence=cadence)[0] == 200
    for node, intervals in declared.items():
        assert kept(fleet_server, node, 1) == intervals


def test_a_new_declaration_replaces_the_old_and_an_older_agent_leaves_none(
    fleet_server: FleetServer,
) -> None:
    node = "gpu-a06-04"
    token = enroll(fleet_server, f"node:{node}")
    assert send(fleet_server, node, token, 1, cadence={"sample_s": 1, "batch_s": 1})[0] == 200
    assert kept(fleet_server, node, 1) == (1.0, 1.0)
    assert send(fleet_server, node, token, 2, cadence={"sample_s": 2, "batch_s": 10})[0] == 200
    assert kept(fleet_server, node, 2) == (2.0, 10.0)
    assert send(fleet_server, node, token, 3)[0] == 200  # downgraded: declares nothing
    assert kept(fleet_server, node, 3) == (None, None)


def test_slower_fields_are_kept_with_their_source(fleet_server: FleetServer) -> None:
    node = "gpu-a07-02"
    token = enroll(fleet_server, f"node:{node}")
    fields = {"energy_j": 30.0, "pcie_tx_kib_s": 300.0}
    cadence = {"sample_s": 1, "batch_s": 1, "fields_s": fields}
    assert send(fleet_server, node, token, 1, cadence=cadence)[0] == 200
    assert kept(fleet_server, node, 1) == (1.0, 1.0)
    sql = "SELECT field_intervals_s FROM fleet_sourcetoken WHERE source = ? AND revoked = ?"
    stored = fleet_server.query(sql, (f"node:{node}", False))[0][0]
    assert (json.loads(stored) if isinstance(stored, str) else stored) == fields


def test_a_bad_cadence_is_refused_naming_the_field_and_changes_nothing(
    fleet_server: FleetServer,
) -> None:
    node = "gpu-a07-01"
    token = enroll(fleet_server, f"node:{node}")
    status, body = send(fleet_server, node, token, 1, cadence={"sample_s": 5, "batch_s": 1})
    assert status == 400
    assert body["error"]["field"] == "cadence.batch_s"
    assert "shorter than sample_s" in body["error"]["reason"]
    stored = fleet_server.count(
        "gpu", "node_id = (SELECT id FROM fleet_node WHERE name = ?)", (node,)
    )
    assert stored == 0
    assert fleet_server.query(SQL, (f"node:{node}", False))[0] == (None, None, None)
