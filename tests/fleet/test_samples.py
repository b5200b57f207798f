"""The one write path: raw rows, events, statements and the latest-state merge are
stored together or not at all, on both engines."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.storage.db import Database, open_db
from fleet.storage.latest import rows_to_latest, select_latest_sql
from fleet.storage.samples import SampleWrite, latest_delta, write_samples
from fleetwatch.env import database_from_url
from tests.support import services
from tests.support.server import FleetServer


@pytest.fixture
def db(tier: str, tmp_path: Path) -> Iterator[Database]:
    name = None
    if tier == "services":
        name = f"fwtest_{uuid.uuid4().hex[:10]}"
        url = services.create_database(services.services_database_url(), name)
        FleetServer(tmp_path, database_url=url).prepare()
        database = open_db(database_from_url(url))
    else:
        FleetServer(tmp_path).prepare()
        path = tmp_path / "fleetwatch.sqlite3"
        database = open_db({"ENGINE": "django.db.backends.sqlite3", "NAME": str(path)})
    try:
        yield database
    finally:
        database.close()
        if name:
            services.drop_database(services.services_database_url(), name)


def a_write(db: Database, ts: float, temp: float) -> SampleWrite:
    node_id = int(db.query("SELECT min(id) FROM fleet_node")[0][0])
    write = SampleWrite()
    write.add_samples("gpu", [((node_id, 0), {"ts": ts, "gpu": 0, "temp_gpu_c": temp})])
    write.events.append(("node:x", 1, 0, ts, node_id, 0, "xid", 79, "fell off the bus"))
    return write


def latest_temp(db: Database) -> tuple[float, float] | None:
    rows = rows_to_latest("gpu", db.query(select_latest_sql("gpu")))
    if not rows:
        return None
    row = next(iter(rows.values()))
    return row.values["temp_gpu_c"], row.ts["temp_gpu_c"]


def test_raw_rows_events_and_latest_state_are_stored_in_one_write(db: Database) -> None:
    ts = time.time() - 10
    write = a_write(db, ts, 61.0)
    write_samples(db, write, latest_delta(write, time.time()))
    assert db.query("SELECT count(*) FROM fw_gpu_raw")[0][0] == 1
    assert db.query("SELECT count(*) FROM fleet_event")[0][0] == 1
    assert latest_temp(db) == (61.0, ts)


def test_a_write_the_database_refuses_stores_nothing_of_it(db: Database) -> None:
    ts = time.time() - 10
    write = a_write(db, ts, 62.0)
    write.statements.append(("INSERT INTO fleet_node (id) VALUES (NULL)", ()))  # refused
    with pytest.raises(Exception):  # noqa: B017 - whichever error the engine raises
        write_samples(db, write, latest_delta(write, time.time()))
    assert db.query("SELECT count(*) FROM fw_gpu_raw")[0][0] == 0
    assert db.query("SELECT count(*) FROM fleet_event")[0][0] == 0
    assert latest_temp(db) is None


def test_a_resend_of_a_stored_write_is_a_no_op(db: Database) -> None:
    ts = time.time() - 10
    for _ in range(2):
        write = a_write(db, ts, 63.0)
        write_samples(db, write, latest_delta(write, time.time()))
    assert db.query("SELECT count(*) FROM fw_gpu_raw")[0][0] == 1
    assert db.query("SELECT count(*) FROM fleet_event")[0][0] == 1
    assert latest_temp(db) == (63.0, ts)


def gpu_samples(db: Database, *stamps: tuple[int, float]) -> SampleWrite:
    node_id = int(db.query("SELECT min(id) FROM fleet_node")[0][0])
    write = SampleWrite()
    write.add_samples("gpu", [((node_id, g), {"ts": ts, "temp_gpu_c": 50.0}) for g, ts in stamps])
    return write


def test_rows_before_the_rollup_seal_leave_one_mark_per_entity_and_minute(db: Database) -> None:
    seal = int(time.time() // 60) * 60 - 60
    before = seal - 120  # a minute the rollup may already have summarised
    write_samples(db, gpu_samples(db, (0, before + 1)))
    assert db.query("SELECT count(*) FROM fw_gpu_late")[0][0] == 0  # no rollup ran yet

    db.query(
        "INSERT INTO fw_rollup_state (tier, kind, done_until, sealed_until)"
        " VALUES ('1m', 'gpu', %s, %s)",
        (seal, seal),
    )
    write_samples(db, gpu_samples(db, (0, before + 2), (0, before + 30), (1, before), (1, seal)))
    marks = db.query("SELECT gpu, tier, bucket FROM fw_gpu_late ORDER BY gpu")
    assert marks == [(0, "1m", before), (1, "1m", before)]  # none for the row at the seal


def test_samples_older_than_the_horizon_are_left_out_and_counted(db: Database) -> None:
    now = time.time()
    write = gpu_samples(db, (0, now - 7200), (1, now - 7200), (2, now - 10))
    assert write_samples(db, write, horizon=now - 3600) == {"gpu": 2}
    assert db.query("SELECT gpu FROM fw_gpu_raw") == [(2,)]
    # the write now holds what was stored: a latest delta built from it leaves them out too
    assert [key[1] for key, _ in write.samples["gpu"]] == [2]
