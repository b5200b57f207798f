"""An existing PostgreSQL installation with unpartitioned, populated tables is partitioned in
place by migration 0016: its rows stay readable, ingest and resends work, and retention later
drops the old table (attached as one legacy partition) once all of it is summarised."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from fleet.storage.db import Database, open_db
from fleet.storage.partitions import slot
from fleet.storage.retention import apply_retention, kept_s
from fleet.storage.samples import SampleWrite, write_samples
from fleetwatch.env import database_from_url
from tests.support import services
from tests.support.server import FleetServer

pytestmark = pytest.mark.services

HOUR = 3600


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FleetServer]:
    name = f"fwtest_{uuid.uuid4().hex[:10]}"
    url = services.create_database(services.services_database_url(), name)
    try:
        yield FleetServer(tmp_path, database_url=url)
    finally:
        services.drop_database(services.services_database_url(), name)


@contextlib.contextmanager
def django_alias(url: str) -> Iterator[str]:
    alias = f"m_{uuid.uuid4().hex[:8]}"
    db = database_from_url(url)
    configured = connections.configure_settings({"default": dict(db), alias: dict(db)})
    connections.settings[alias] = configured[alias]
    try:
        yield alias
    finally:
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]


def gpu_write(ts: float) -> SampleWrite:
    write = SampleWrite()
    write.add_samples("gpu", [((9, g), {"ts": ts, "power_w": 400.0 + g}) for g in range(4)])
    return write


def count(db: Database, where: str = "true") -> int:
    return int(db.query(f"SELECT count(*) FROM fw_gpu_raw WHERE {where}")[0][0])


def test_a_populated_unpartitioned_installation_is_partitioned_in_place(
    server: FleetServer, django_db_blocker: Any
) -> None:
    now = time.time()
    server.var_dir.mkdir(parents=True, exist_ok=True)
    server.manage("migrate", "-v0", "fleet", "0015")
    db = open_db(database_from_url(server.database_url or ""))
    try:
        # Five hours of an old installation: raw rows, a day of minutes, summarised so far.
        db.query(
            "INSERT INTO fw_gpu_raw (ts, node_id, gpu, power_w) SELECT t, 9, g, 300"
            " FROM generate_series(%s::bigint, %s::bigint, 10) t, generate_series(0, 3) g",
            [int(now) - 5 * HOUR, int(now) - 60],
        )
        db.query(
            "INSERT INTO fw_gpu_1m (node_id, gpu, bucket, n) SELECT 9, 0, b, 6"
            " FROM generate_series(%s::bigint, %s::bigint, 60) b",
            [int(now) // 60 * 60 - 86400, int(now) // 60 * 60 - 60],
        )
        old_raw, old_minutes = count(db), 1440
        db.query(
            "INSERT INTO fw_rollup_state (tier, kind, done_until) VALUES ('1m', 'gpu', %s)",
            [int(now) - 4 * HOUR],
        )

        server.manage("migrate", "-v0")

        kinds = db.query(
            "SELECT relname, relkind FROM pg_class WHERE relname IN"
            " ('fw_gpu_raw', 'fw_gpu_raw_legacy', 'fw_gpu_1m', 'fw_gpu_1m_legacy')"
        )
        assert dict(kinds) == {
            "fw_gpu_raw": "p",
            "fw_gpu_raw_legacy": "r",
            "fw_gpu_1m": "p",
            "fw_gpu_1m_legacy": "r",
        }
        assert count(db) == old_raw  # every row, read through the partitioned parent
        assert db.query("SELECT count(*) FROM fw_gpu_1m") == [(old_minutes,)]

        later = slot("raw", now)[1] + 5  # past the legacy boundary: a new partition
        for ts in (now, later):
            write_samples(db, gpu_write(ts))
            write_samples(db, gpu_write(ts))  # a resend is still a no-op
        assert count(db) == old_raw + 8

        boundary = slot("raw", now)[1]
        after_all = boundary + kept_s("raw", "gpu") + HOUR
        with django_db_blocker.unblock(), django_alias(server.database_url or "") as alias:
            apply_retention(after_all, using=alias)
            # The 1m tier covered only up to four hours ago: the legacy partition stays whole.
            assert count(db) == old_raw + 8

            db.query("UPDATE fw_rollup_state SET done_until = %s", [int(boundary)])
            apply_retention(after_all, using=alias)

        # Summarised up to the boundary: the legacy partition went as a whole, and the rows
        # of the new partition after it (not yet summarised) are still there.
        assert db.query("SELECT to_regclass('fw_gpu_raw_legacy')") == [(None,)]
        assert count(db) == 4
        assert count(db, f"ts = {later}") == 4
    finally:
        db.close()
