"""A name the ingest writer does not know, met while its inventory was read under
RELOAD_MIN_S ago, may have been added since: the batch is answered "resend later" (503) —
the agent resends — never refused (a 403 stops an agent, a 400 drops the batch). Once the
writer reads the inventory again, the batch is stored, or refused if the name is really
unknown. Driven through the pipeline with the writer's clock in the test's hand."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.ingest import inventory
from fleet.ingest.inventory import RELOAD_MIN_S
from fleet.ingest.pipeline import IngestPipeline, Result
from fleet.storage.db import SqliteDb
from tests.support.agent import gpu_batch
from tests.support.server import FleetServer

KNOWN = "gpu-a01-01"
ADDED = "gpu-a01-99"  # imported after the writer first read the inventory
GHOST = "gpu-zz-01"  # never in the inventory


@pytest.fixture
def server(tmp_path: Path) -> FleetServer:
    server = FleetServer(tmp_path / "srv", racks=1)
    server.prepare()
    return server


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(inventory, "_clock", lambda: now[0])
    return now


@pytest.fixture
def pipeline(server: FleetServer, clock: list[float]) -> Iterator[IngestPipeline]:
    pipeline = IngestPipeline(SqliteDb(str(server.var_dir / "fleetwatch.sqlite3")), 0.0)
    for conn, node in enumerate((KNOWN, ADDED, GHOST), start=1):
        pipeline.hello(conn, f"node:{node}", conn, "hash")
    yield pipeline
    pipeline.db.close()


def send(pipeline: IngestPipeline, conn: int, node: str, seq: int) -> Result:
    batch = gpu_batch(node, seq, ts=time.time() - 10, gpus=1)
    [result] = pipeline.process([(conn, json.dumps(batch).encode())], time.time())
    return result


def add_node(server: FleetServer, name: str) -> None:
    server.manage(
        "shell",
        "-c",
        "from fleet.models import GPU, Node, Rack\n"
        f"node = Node.objects.create(name={name!r}, rack=Rack.objects.get(name='A01'),"
        " position=41)\n"
        "GPU.objects.create(node=node, index=0)\n",
    )


def test_a_node_added_since_the_last_read_is_asked_to_resend_then_stored(
    server: FleetServer, pipeline: IngestPipeline, clock: list[float]
) -> None:
    assert send(pipeline, 1, KNOWN, 1).code == 0  # the writer reads the inventory now
    add_node(server, ADDED)
    clock[0] += RELOAD_MIN_S / 2

    resend = send(pipeline, 2, ADDED, 1)
    assert resend.code == 503
    assert resend.error is not None and resend.error["field"] == "source"
    assert "resend" in resend.error["reason"]

    clock[0] += RELOAD_MIN_S
    assert send(pipeline, 2, ADDED, 1).code == 0
    assert server.query(
        "SELECT count(*) FROM fw_gpu_raw r JOIN fleet_node n ON n.id = r.node_id WHERE n.name = ?",
        (ADDED,),
    ) == [(1,)]


def test_a_node_still_missing_after_the_next_read_is_refused(
    pipeline: IngestPipeline, clock: list[float]
) -> None:
    assert send(pipeline, 1, KNOWN, 1).code == 0
    clock[0] += RELOAD_MIN_S / 2
    assert send(pipeline, 3, GHOST, 1).code == 503
    clock[0] += RELOAD_MIN_S
    refused = send(pipeline, 3, GHOST, 1)
    assert refused.code == 403
    assert refused.error is not None and "not in the inventory" in refused.error["reason"]
