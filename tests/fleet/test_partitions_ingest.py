"""Through the real ingest path on PostgreSQL: a starting ingest child makes the raw time
partitions it needs, and a batch whose partition is missing is answered 503 (resent), never
400 (dropped), and lands once the partition is made."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.storage.partitions import families, slot
from tests.support import services
from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.server import FleetServer

pytestmark = pytest.mark.services


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FleetServer]:
    name = f"fwtest_{uuid.uuid4().hex[:10]}"
    url = services.create_database(services.services_database_url(), name)
    server = FleetServer(tmp_path, database_url=url, redis_url=services.services_redis_url())
    try:
        server.prepare()
        yield server
    finally:
        server.stop()
        services.drop_database(services.services_database_url(), name)


def drop_raw_partitions_from(server: FleetServer, since: float) -> None:
    """Drop every raw partition from `since` on (as if no one had made them)."""
    for family in families(["raw"]):
        rows = server.query(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            (family.table,),
        )
        for name, bound in rows:
            if "MINVALUE" not in bound and float(bound.split("'")[1]) >= since:
                server.execute(f"DROP TABLE {name}")


def raw_partition_count(server: FleetServer) -> int:
    return int(
        server.query("SELECT count(*) FROM pg_inherits WHERE inhparent = 'fw_gpu_raw'::regclass")[
            0
        ][0]
    )


def test_an_ingest_child_makes_its_partitions_and_a_missing_one_costs_a_resend_not_data(
    server: FleetServer,
) -> None:
    hour = slot("raw", time.time())[0]
    drop_raw_partitions_from(server, hour)  # the beat never ran, the migration was long ago
    server.start()
    token = enroll(server, "node:gpu-a01-01")

    # The first batch starts the ingest child, which makes this hour's partition and a day
    # ahead before it reads the batch.
    status, body = post_json(server.url + "/api/v1/ingest", gpu_batch("gpu-a01-01", 1), token)
    assert (status, body.get("ack")) == (200, 1)
    assert raw_partition_count(server) >= 25

    # This hour's partition gone while it runs: the batch is answered 503 and nothing of it
    # stored; the agent resends it once the partition is there again.
    drop_raw_partitions_from(server, hour)
    status, _ = post_json(server.url + "/api/v1/ingest", gpu_batch("gpu-a01-01", 2), token)
    assert status == 503
    server.manage("partitions", "--quiet")
    status, body = post_json(server.url + "/api/v1/ingest", gpu_batch("gpu-a01-01", 2), token)
    assert (status, body.get("ack")) == (200, 2)
    assert server.count("gpu") == 8  # the second batch; the first went with its partition
