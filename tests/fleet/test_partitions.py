"""PostgreSQL time partitions: made ahead of time, a row with none is resent rather than
refused, an interrupted detach is finished, and ingest commits keep flowing while
retention drops partitions. (SQLite has no partitions: see test_retention.py.)"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connections

from fleet.storage.db import Database, open_db
from fleet.storage.dialect import failure_kind
from fleet.storage.partitions import (
    AHEAD,
    django_runner,
    ensure_between,
    ensure_partitions,
    families,
    list_partitions,
    slot,
    slots,
)
from fleet.storage.retention import apply_retention, kept_s
from fleet.storage.rollups import rollup
from fleet.storage.samples import SampleWrite, write_samples
from fleetwatch.env import database_from_url
from tests.support import databases, services
from tests.support.databases import TierDb
from tests.support.waiting import wait_until

pytestmark = pytest.mark.services

HOUR = 3600


pg = databases.fresh_postgres_db  # a PostgreSQL database of the test's own


@pytest.fixture
def writer(pg: TierDb) -> Iterator[Database]:
    assert pg.url is not None
    database = open_db(database_from_url(pg.url))
    try:
        yield database
    finally:
        database.close()


def partitions(db: TierDb) -> dict[str, list[Any]]:
    tables = [f.table for f in families()]
    return django_runner(db.alias)(lambda ex: list_partitions(ex, tables))


def gpu_write(ts: float, gpus: int = 8, node: int = 1) -> SampleWrite:
    write = SampleWrite()
    write.add_samples("gpu", [((node, g), {"ts": ts, "power_w": 300.0 + g}) for g in range(gpus)])
    return write


def count(db: TierDb, sql: str) -> int:
    return int(db.execute(sql)[0][0])


def test_partitions_cover_each_tables_horizon_to_well_ahead_and_a_second_pass_makes_none(
    pg: TierDb,
) -> None:
    now = time.time()
    ensure_partitions(now, using=pg.alias)  # the template was made a while ago

    assert ensure_partitions(now, using=pg.alias) == []

    existing = partitions(pg)
    for family in families():
        _, end = slot(family.tier, now)
        for _ in range(AHEAD[family.tier]):
            _, end = slot(family.tier, end)
        wanted = slots(family.tier, now - kept_s(family.tier, family.kind), end)
        have = existing[family.table]
        missing = [s for s in wanted if not any(p.lo <= s[0] and s[1] <= p.hi for p in have)]
        assert missing == [], family.table
    # A fresh install is partitioned from the start: no legacy partition.
    assert not any(p.name.endswith("_legacy") for parts in existing.values() for p in parts)


def test_a_new_partition_has_the_keys_resends_and_time_reads_rely_on(
    pg: TierDb, writer: Database
) -> None:
    ts = time.time() + 20 * HOUR  # a partition made ahead, not yet written to
    write_samples(writer, gpu_write(ts))
    write_samples(writer, gpu_write(ts))  # a resend after a lost ack: a no-op

    assert count(pg, f"SELECT count(*) FROM fw_gpu_raw WHERE ts = {ts}") == 8
    name = next(p.name for p in partitions(pg)["fw_gpu_raw"] if p.lo <= ts < p.hi)
    indexes = pg.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [name])
    definitions = sorted(str(r[0]).split(" USING ")[1] for r in indexes)
    assert definitions == ["brin (ts)", "btree (node_id, gpu, ts)"]


def test_a_row_with_no_partition_yet_is_answered_retry_and_lands_once_it_exists(
    pg: TierDb, writer: Database
) -> None:
    ts = time.time() + 400 * 86400  # far past every partition made ahead
    with pytest.raises(psycopg.Error) as failed:
        write_samples(writer, gpu_write(ts))
    assert "no partition of relation" in str(failed.value)
    assert failure_kind(failed.value) == "retry"  # 503: the agent resends, nothing dropped

    families_raw = {f: (ts, ts + 1) for f in families(["raw"])}
    ensure_between(django_runner(pg.alias), families_raw)
    write_samples(writer, gpu_write(ts))

    assert count(pg, f"SELECT count(*) FROM fw_gpu_raw WHERE ts = {ts}") == 8


def summarised(db: TierDb, tier: str, done_until: float) -> None:
    db.insert(
        "fw_rollup_state",
        ("tier", "kind", "done_until"),
        [(tier, f.kind, int(done_until)) for f in families(["raw"])],
    )


def backlog(db: TierDb, now: float, hours: int) -> None:
    """`hours` of raw GPU partitions, past the raw horizon, with rows in them."""
    start = slot("raw", now)[0] - (hours + 4) * HOUR
    end = slot("raw", now)[0] - 4 * HOUR
    ensure_between(django_runner(db.alias), {f: (start, end) for f in families(["raw"])})
    db.execute(
        "INSERT INTO fw_gpu_raw (ts, node_id, gpu, power_w)"
        " SELECT t, 1, g, 300 FROM generate_series(%s::bigint, %s::bigint - 1, 30) t,"
        " generate_series(0, 7) g",
        [int(start), int(end)],
    )


def test_an_interrupted_detach_is_finished_by_the_next_retention_pass(pg: TierDb) -> None:
    now = time.time()
    backlog(pg, now, hours=2)
    summarised(pg, "1m", now)
    victim = partitions(pg)["fw_gpu_raw"][0]
    assert pg.url is not None
    conninfo = services._conninfo(pg.url)
    with psycopg.connect(conninfo) as reader, psycopg.connect(conninfo, autocommit=True) as ddl:
        reader.execute("SELECT count(*) FROM fw_gpu_raw")  # a transaction using the parent
        pid = ddl.info.backend_pid

        def cancel_once_waiting() -> None:
            with psycopg.connect(conninfo, autocommit=True) as admin:
                for _ in range(200):
                    waiting = admin.execute(
                        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
                    ).fetchone()
                    if waiting and waiting[0] == "Lock":
                        admin.execute("SELECT pg_cancel_backend(%s)", [pid])
                        return
                    time.sleep(0.02)

        canceller = threading.Thread(target=cancel_once_waiting)
        canceller.start()
        with pytest.raises(psycopg.errors.QueryCanceled):
            ddl.execute(f"ALTER TABLE fw_gpu_raw DETACH PARTITION {victim.name} CONCURRENTLY")
        canceller.join()
        reader.rollback()
    assert next(p for p in partitions(pg)["fw_gpu_raw"] if p.name == victim.name).detach_pending

    apply_retention(now, using=pg.alias)

    assert pg.execute("SELECT to_regclass(%s)", [victim.name]) == [(None,)]
    assert count(pg, f"SELECT count(*) FROM fw_gpu_raw WHERE ts < {now - 4 * HOUR}") == 0


BACKLOG_H = 90


def test_ingest_commits_keep_flowing_while_retention_drops_a_backlog_of_partitions(
    pg: TierDb, writer: Database
) -> None:
    now = time.time()
    # 90 partitions of each kind to drop: a pass of a second or more (0.93 s for 60 on a
    # quiet 2-core machine)
    backlog(pg, now, hours=BACKLOG_H)
    summarised(pg, "1m", now)
    before = sum(len(v) for v in partitions(pg).values())
    commits: list[float] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def ingest() -> None:
        node = 0
        while not stop.is_set():
            node += 1
            try:
                write_samples(writer, gpu_write(time.time(), node=node))
            except BaseException as exc:
                errors.append(exc)
                return
            commits.append(time.monotonic())
            time.sleep(0.05)

    thread = threading.Thread(target=ingest)
    thread.start()
    try:
        wait_until(lambda: len(commits) >= 3 or errors, 30, "ingest commits flowing")
        started = time.monotonic()
        apply_retention(now, using=pg.alias)
        finished = time.monotonic()
        wait_until(lambda: commits[-1] > finished or errors, 30, "a commit after the pass")
    finally:
        stop.set()
        thread.join()

    assert errors == []
    dropped = before - sum(len(v) for v in partitions(pg).values())
    assert dropped >= BACKLOG_H * 6
    assert finished - started > 0.5, "the pass was too short to show anything"
    during = [t for t in commits if started - 1 <= t <= finished + 0.3]
    gaps = [b - a for a, b in itertools.pairwise(during)]
    assert len(during) > 5 and max(gaps) < 1.0, f"longest gap {max(gaps):.2f} s"
    assert count(pg, f"SELECT count(*) FROM fw_gpu_raw WHERE ts < {now - 4 * HOUR}") == 0
    assert count(pg, f"SELECT count(*) FROM fw_gpu_raw WHERE ts >= {now}") == 8 * len(commits)


def test_dropping_partitions_holds_no_lock_an_ingest_commit_waits_for(
    pg: TierDb, writer: Database
) -> None:
    """A long reader of an old partition keeps its DETACH waiting; ingest goes on meanwhile."""
    now = time.time()
    backlog(pg, now, hours=1)
    summarised(pg, "1m", now)
    assert pg.url is not None
    with psycopg.connect(services._conninfo(pg.url)) as reader:
        reader.execute(f"SELECT count(*) FROM fw_gpu_raw WHERE ts < {now - 4 * HOUR}")

        def retain() -> None:
            try:
                apply_retention(now, using=pg.alias)
            finally:
                connections[pg.alias].close()  # this thread's own connection

        retention = threading.Thread(target=retain)
        retention.start()
        wait_until(
            lambda: pg.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )[0][0],
            30,
            "the retention pass waiting for the reader's lock",
        )
        started = time.monotonic()
        write_samples(writer, gpu_write(time.time()))
        took = time.monotonic() - started
        assert retention.is_alive()
        reader.rollback()
    retention.join(timeout=30)
    assert took < 1.0
    assert count(pg, f"SELECT count(*) FROM fw_gpu_raw WHERE ts < {now - 4 * HOUR}") == 0


def test_the_rollup_summarises_the_live_raw_partitions_new_pages_before_reading_them(
    pg: TierDb,
) -> None:
    """Unsummarised BRIN ranges make every minute's read scan the whole live partition:
    a tick grew through the hour at 10,000 GPUs. After a rollup none are left."""
    now = time.time()
    hour_lo, _ = slot("raw", now)
    if now - hour_lo < 600:  # too early in the hour: use the last one's partition
        now = hour_lo - 1.0
        hour_lo, _ = slot("raw", now)
    start = max(hour_lo, int(now) - 1800)  # inside one hour's partition, before `now`
    rows = [(float(t), node, 5.0) for t in range(start, int(now) - 120) for node in range(1, 21)]
    pg.insert("fw_node_raw", ("ts", "node_id", "cpu_pct"), rows)
    index = pg.execute(
        "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_class c"
        " ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
        " WHERE i.indrelid = to_regclass(%s) AND a.amname = 'brin'",
        [f"fw_node_raw_p{time.strftime('%Y%m%dt%H', time.gmtime(hour_lo))}"],
    )[0][0]

    rollup("1m", "node", now, using=pg.alias)

    left = pg.execute("SELECT brin_summarize_new_values(%s::regclass)", [index])[0][0]
    assert left == 0, f"{left} BRIN ranges of the live partition were left unsummarised"
