"""Late data through the one write path, on every tier: a node back after an outage
costs a recompute of its own minutes only, a node whose clock is days behind cannot
pin retention, and (PostgreSQL) an ingest commit never waits on a rollup.

The rollup tables are compared with the oracle of tests/support/rollup_oracle.py
(`expected`)."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.conf import settings
from django.db import connections, transaction
from django.utils.dateparse import parse_datetime

from fleet.ingest.pipeline import IngestPipeline
from fleet.storage import late, samples
from fleet.storage.db import Database, SqliteDb, open_db
from fleet.storage.late import late_table
from fleet.storage.retention import apply_retention
from fleet.storage.rollups import claim, read_state, rollup
from fleet.storage.samples import SampleWrite, write_samples
from fleetwatch.env import database_from_url
from tests.support import databases
from tests.support.agent import enroll, gpu_batch, post_json
from tests.support.databases import T, TierDb, register_alias
from tests.support.rollup_oracle import (
    GPU_METRICS,
    GPUS,
    expected,
    gpu_row,
    roll,
    store_raw,
    stored,
)
from tests.support.server import FleetServer

db = databases.fresh_db_at_test_clock  # each test's own database, both tiers

RAW_KEEP = int(settings.RETENTION_RAW_HOURS * 3600)
MARKER = -1.0  # put in a column no sample carries: a rewritten rollup row loses it


@contextlib.contextmanager
def ingest_db(db: TierDb) -> Iterator[Database]:
    """The ingest child's own connection to the test database."""
    database = open_db(dict(connections[db.alias].settings_dict))
    try:
        yield database
    finally:
        database.close()


def gpu_write(rows: list[tuple[Any, ...]]) -> SampleWrite:
    """Raw GPU rows (ts, node, gpu, metrics…) as the ingest pipeline hands them over."""
    write = SampleWrite()
    for row in rows:
        sample = {"ts": row[0]} | {
            m: v for m, v in zip(GPU_METRICS, row[3:], strict=True) if v is not None
        }
        write.add_samples("gpu", [((row[1], row[2]), sample)])
    return write


def gpu_rows(start: int, stop: int, gpus: list[tuple[int, int]], every: int = 5) -> list[Any]:
    return [gpu_row(t, n, g) for t in range(start, stop, every) for n, g in gpus]


def mark_rollup_rows(db: TierDb) -> None:
    for tier in ("1m", "1h"):
        db.execute(f"UPDATE fw_gpu_{tier} SET fan_pct_min = %s", [MARKER])


def unmarked(db: TierDb, tier: str) -> set[tuple[int, int, int]]:
    rows = db.execute(
        f"SELECT node_id, gpu, bucket FROM fw_gpu_{tier}"
        " WHERE fan_pct_min IS NULL OR fan_pct_min <> %s",
        [MARKER],
    )
    return {(int(n), int(g), int(b)) for n, g, b in rows}


def pending_marks(db: TierDb) -> int:
    return int(db.execute(f"SELECT count(*) FROM {late_table('gpu')}")[0][0])


def test_a_node_back_after_an_hour_away_costs_a_recompute_of_its_own_minutes_only(
    db: TierDb,
) -> None:
    away = [(2, 0)]
    present = [g for g in GPUS if g not in away]
    on_time = gpu_rows(T - 7200, T, present) + gpu_rows(T - 7200, T - 3600, away)
    store_raw(db, {"gpu": on_time})
    roll(db, T + 30)
    mark_rollup_rows(db)

    # The node reconnects and sends its spool: the last hour, after the rollup passed it.
    spool = gpu_rows(T - 3600, T, away)
    with ingest_db(db) as ingest:
        assert write_samples(ingest, gpu_write(spool), horizon=T + 40 - RAW_KEEP) == {}
    assert pending_marks(db) == 60  # one per (entity, minute)

    minutes_written = rollup("1m", "gpu", T + 40, using=db.alias)
    rollup("1h", "gpu", T + 40, using=db.alias)

    assert minutes_written == 60
    assert unmarked(db, "1m") == {(2, 0, b) for b in range(T - 3600, T, 60)}
    assert unmarked(db, "1h") == {(2, 0, T - 3600)}
    everything = on_time + spool
    assert stored(db, "gpu", "1m") == expected("gpu", everything, 60, before=T)
    assert stored(db, "gpu", "1h") == expected("gpu", everything, 3600, before=T)
    assert pending_marks(db) == 0


def test_a_node_whose_clock_is_days_behind_cannot_stop_raw_retention(db: TierDb) -> None:
    store_raw(db, {"gpu": gpu_rows(T - RAW_KEEP - 3600, T, GPUS, every=60)})
    roll(db, T)

    # Its samples say three days ago: history as old as that is not stored raw.
    behind = gpu_rows(T - 3 * 86400, T - 3 * 86400 + 600, [(3, 0)])
    current = gpu_rows(T - 30, T, [(3, 1)])
    with ingest_db(db) as ingest:
        too_old = write_samples(ingest, gpu_write(behind + current), horizon=T - RAW_KEEP)

    assert too_old == {"gpu": len(behind)}
    assert db.execute("SELECT count(*) FROM fw_gpu_raw WHERE node_id = 3") == [(len(current),)]
    assert pending_marks(db) == 0
    apply_retention(T, using=db.alias)
    assert db.execute("SELECT min(ts) FROM fw_gpu_raw") == [(float(T - RAW_KEEP),)]


def test_a_recompute_of_marked_minutes_agrees_with_the_oracle_after_a_resend(
    db: TierDb,
) -> None:
    rows = gpu_rows(T - 600, T, GPUS)
    store_raw(db, {"gpu": rows})
    roll(db, T + 30)
    before = stored(db, "gpu", "1m")
    with ingest_db(db) as ingest:  # an agent resends a batch whose ack was lost
        write_samples(ingest, gpu_write(rows[:30]), horizon=T - RAW_KEEP)
    assert pending_marks(db) > 0
    roll(db, T + 40)
    assert stored(db, "gpu", "1m") == before == expected("gpu", rows, 60, before=T)
    assert pending_marks(db) == 0


# ---------------------------------------------------------------------------
# PostgreSQL: ingest never queues behind maintenance, and no row is lost in the race


def hold_rollup_transaction(db: TierDb, holding: threading.Event, release: threading.Event) -> bool:
    """What a 1m and a retention transaction lock, held until `release` (at most 15 s).
    True if it was released rather than timing out."""
    try:
        with transaction.atomic(using=db.alias), connections[db.alias].cursor() as cur:
            seen = read_state(cur, "1m", "gpu")
            assert seen is not None and claim(cur, "1m", "gpu", seen)
            cur.execute("SELECT 1 FROM fw_rollup_state WHERE tier = '1h' FOR SHARE")
            late.take_marks(cur, "gpu", "1m", 100)
            holding.set()
            return release.wait(15)
    finally:
        connections[db.alias].close()


def test_ingest_commits_complete_while_a_rollup_transaction_holds_its_locks(
    db: TierDb,
) -> None:
    if db.vendor != "postgresql":
        pytest.skip("PostgreSQL only: SQLite has one writer at a time by design")
    store_raw(db, {"gpu": gpu_rows(T - 600, T, GPUS)})
    roll(db, T + 30)
    holding, release = threading.Event(), threading.Event()
    result: list[bool] = []
    holder = threading.Thread(
        target=lambda: result.append(hold_rollup_transaction(db, holding, release))
    )
    holder.start()
    try:
        assert holding.wait(10)
        with ingest_db(db) as ingest:
            # late rows (they leave marks) and on-time rows, several commits
            for start in range(T - 300, T + 60, 60):
                write_samples(ingest, gpu_write(gpu_rows(start, start + 60, GPUS)))
        committed_while_held = not release.is_set() and holder.is_alive()
    finally:
        release.set()
        holder.join()
    assert committed_while_held and result == [True]


def test_rows_committed_while_the_rollup_moves_the_seal_are_never_lost(
    db: TierDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that stores rows, reads the seal and commits slowly, racing a rollup that
    keeps moving the seal over the minutes it writes: every row ends up summarised."""
    original = samples.late_marks

    def slow_marks(tx: Any, write: SampleWrite) -> Any:
        time.sleep(0.02)  # raw rows stored, seal not read yet
        found = original(tx, write)
        time.sleep(0.02)  # seal read, not committed yet
        return found

    monkeypatch.setattr(samples, "late_marks", slow_marks)
    clock = [T - 150.0]
    written: list[tuple[Any, ...]] = []
    failures: list[BaseException] = []

    def write_on() -> None:
        try:
            with ingest_db(db) as ingest:
                while clock[0] < T:
                    now = int(clock[0])
                    # this second's rows, and a straggler from up to 80 s back
                    rows = gpu_rows(now, now + 1, GPUS, every=1)
                    back = now - 40 - now % 41
                    rows += [gpu_row(back, 1, 1)] if back >= T - 150 else []
                    fresh = [r for r in rows if r not in written]
                    write_samples(ingest, gpu_write(fresh))
                    written.extend(fresh)
                    clock[0] += 1
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    writer = threading.Thread(target=write_on)
    writer.start()
    try:
        while writer.is_alive():
            # A rollup whose clock runs ahead of the data (as if the grace were too
            # short): it seals minutes the writer is still storing rows in.
            rollup("1m", "gpu", clock[0] + 70, using=db.alias)
    finally:
        writer.join()
    assert not failures
    rollup("1m", "gpu", T + 130, using=db.alias)
    assert stored(db, "gpu", "1m") == expected("gpu", written, 60, before=T)


def test_a_commit_that_read_the_old_seal_is_waited_for_before_the_minute_is_summarised(
    db: TierDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exact race: a commit stores rows of a minute the rollup has not reached, reads
    the seal (old: no mark needed), and only commits after the rollup moved the seal
    past that minute. The rollup must not summarise the minute without those rows."""
    store_raw(db, {"gpu": gpu_rows(T - 300, T - 120, GPUS)})
    rollup("1m", "gpu", T - 120 + 10, using=db.alias)  # done and sealed until T - 120
    seal_read, go_commit = threading.Event(), threading.Event()
    original = samples.late_marks

    def pause_after_reading_the_seal(tx: Any, write: SampleWrite) -> Any:
        found = original(tx, write)
        seal_read.set()
        go_commit.wait(10)
        return found

    monkeypatch.setattr(samples, "late_marks", pause_after_reading_the_seal)
    in_flight = gpu_rows(T - 120, T - 60, GPUS)

    def commit() -> None:
        with ingest_db(db) as ingest:
            write_samples(ingest, gpu_write(in_flight))

    writer = threading.Thread(target=commit)
    writer.start()
    assert seal_read.wait(10)
    roller = threading.Thread(target=roll_in_thread, args=(db, T + 10))
    roller.start()
    time.sleep(0.3)  # the rollup seals and reaches its aggregate (or its wait) meanwhile
    go_commit.set()
    writer.join()
    roller.join()
    assert pending_marks(db) == 0  # the rows were stored without a mark…
    everything = gpu_rows(T - 300, T - 120, GPUS) + in_flight
    assert stored(db, "gpu", "1m") == expected("gpu", everything, 60, before=T)  # …and count


def roll_in_thread(db: TierDb, now: float) -> None:
    try:
        rollup("1m", "gpu", now, using=db.alias)
    finally:
        connections[db.alias].close()  # this thread's own connection


def test_the_ingest_writer_acks_a_batch_older_than_raw_retention_and_counts_it(
    tmp_path: Path,
) -> None:
    server = FleetServer(tmp_path)
    server.prepare()
    pipeline = IngestPipeline(SqliteDb(str(tmp_path / "fleetwatch.sqlite3")), save_interval_s=0)
    try:
        pipeline.hello(1, "node:gpu-a01-01", 1, "hash")
        now = time.time()
        behind = gpu_batch("gpu-a01-01", 1, ts=now - RAW_KEEP - 3600, temp_gpu_c=40)
        on_time = gpu_batch("gpu-a01-01", 2, ts=now - 1, temp_gpu_c=70)
        frames = [(1, orjson.dumps(behind)), (1, orjson.dumps(on_time))]
        assert [r.code for r in pipeline.process(frames, now)] == [0, 0]  # both acked
        assert pipeline.counters.too_old == 8  # one sample per GPU
        assert pipeline.counters.samples == 8
        assert pipeline.db.query("SELECT min(ts), count(*) FROM fw_gpu_raw") == [(now - 1, 8)]
        # counted for the admin's "Refused input", per source, as acknowledged (200)
        [(source, status, count, reason, last_at)] = pipeline.db.query(
            "SELECT source, status, count, last_reason, last_at FROM fleet_rejectiontally"
        )
        assert (source, status, count) == ("node:gpu-a01-01", 200, 1)
        assert reason.startswith("8 samples older than raw retention")
        assert parse_datetime(last_at) is not None  # in the form Django reads back
    finally:
        pipeline.db.close()


def test_acks_keep_flowing_while_a_rollup_holds_its_locks_on_postgresql(
    tier: str, tmp_path: Path, django_db_blocker: Any
) -> None:
    """The real ingest path (HTTP, server, ingest child) while a rollup transaction holds
    the state row and the marks it took: every batch, late ones included, is acked."""
    if tier != "services":
        pytest.skip("PostgreSQL only: SQLite has one writer at a time by design")
    with FleetServer.started(tmp_path / "server", tier=tier) as server:
        assert server.database_url is not None
        token = enroll(server, "node:gpu-a01-01")
        url = server.url + "/api/v1/ingest"
        assert post_json(url, gpu_batch("gpu-a01-01", 1, ts=time.time() - 600), token)[0] == 200
        server.manage("rollup")  # the state rows exist, the seal is a minute or so back
        alias = "acks_" + uuid.uuid4().hex[:8]
        register_alias(alias, database_from_url(server.database_url))
        holding, release = threading.Event(), threading.Event()
        held: list[bool] = []
        with django_db_blocker.unblock():
            db = TierDb(tier, alias, tmp_path, server.database_url)
            holder = threading.Thread(
                target=lambda: held.append(hold_rollup_transaction(db, holding, release))
            )
            holder.start()
            try:
                assert holding.wait(10)
                acked_at = [time.monotonic()]
                for seq in range(2, 22):  # a late batch (it leaves marks), then an on-time one
                    ts = time.time() - (300 if seq % 2 else 1)
                    status, body = post_json(url, gpu_batch("gpu-a01-01", seq, ts=ts), token)
                    assert status == 200, body
                    acked_at.append(time.monotonic())
                acked_while_held = holder.is_alive() and not release.is_set()
            finally:
                release.set()
                holder.join()
                del connections.settings[alias]
        gaps = [b - a for a, b in itertools.pairwise(acked_at)]
        assert acked_while_held and held == [True]
        assert max(gaps) < 1.0, gaps
        late_marks = server.query("SELECT count(*) FROM fw_gpu_late WHERE tier = '1m'")
        assert late_marks[0][0] > 0  # the late batches were marked, not waited for
        # and a batch from a clock hours behind is acked, counted, not stored
        behind = gpu_batch("gpu-a01-01", 30, ts=time.time() - RAW_KEEP - 600)
        assert post_json(url, behind, token)[0] == 200
        assert server.query(
            "SELECT status, count FROM fleet_rejectiontally WHERE source = 'node:gpu-a01-01'"
        ) == [(200, 1)]
        assert server.count("gpu", "ts < ?", (time.time() - RAW_KEEP,)) == 0
