"""Sealed raw spans packed (fleet/storage/packed.py) read exactly as the raw rows did.

An oracle: a known series goes into the raw tables and is rolled up; history and rollups
read from it left raw are the reference; after the packer has moved the sealed spans into
packed rows (and freed the raw rows), every reader must give the same answers. Late data
and resends landing in the raw table for a packed span are read once, and merged into
the span by the next pass. Both tiers (SQLite, PostgreSQL)."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest
from django.db import connections

from fleet.read.history import History, history
from fleet.storage import packed, packed_codec, packed_read
from fleet.storage.late import late_table
from fleet.storage.retention import apply_retention
from fleet.storage.schema import packed_table, raw_table
from tests.support import databases
from tests.support.databases import T, TierDb
from tests.support.rollup_oracle import (
    GPU_METRICS,
    expected,
    gpu_row,
    roll,
    series,
    store_raw,
    stored,
)
from tests.support.waiting import wait_until

db = databases.fresh_db_at_test_clock  # each test's own database, both tiers

NOW = T + 30  # the 1-minute rollup is done to T: the two hours before it are sealed
GPU = (1, 0)
# Within SQLite's raw-tier reach (15 minutes), across the edge of two sealed hours.
ACROSS_SPANS = (T - 3600 - 450, T - 3600 + 450)


def seeded(db: TierDb) -> dict[str, list[tuple[Any, ...]]]:
    raw = series(T - 7200, T + 30)
    store_raw(db, raw)
    roll(db, NOW)
    return raw


def read(db: TierDb, start: float, end: float) -> History:
    return history("gpu", GPU, GPU_METRICS, start, end, now=NOW, using=db.alias)


def rounded(h: History) -> dict[str, Any]:
    """The points a chart draws, to 12 significant digits (a mean summed in another
    order may differ in its last bit)."""

    def r(v: float | None) -> float | None:
        return None if v is None else float(f"{v:.12g}")

    return {
        "tier": h.tier,
        "series": {
            name: ([(t, r(v)) for t, v in s.points], list(map(r, s.min)), list(map(r, s.max)))
            for name, s in h.series.items()
        },
    }


def count(db: TierDb, table: str, where: str = "", params: list[Any] | None = None) -> int:
    return int(db.execute(f"SELECT count(*) FROM {table} {where}", params or [])[0][0])


def pack_all(db: TierDb) -> dict[str, int]:
    return packed.pack_sealed(using=db.alias)


def mark(db: TierDb, ts: float, entity: tuple[int, int] = GPU) -> None:
    db.insert(
        late_table("gpu"),
        ("node_id", "gpu", "tier", "bucket"),
        [(*entity, "1m", int(ts) // 60 * 60)],
    )


# ---------------------------------------------------------------------------


def test_packing_moves_sealed_spans_out_of_the_raw_table(db: TierDb) -> None:
    raw = seeded(db)
    written = pack_all(db)
    assert written["gpu"] == 2 * 3  # two sealed hours, three GPUs
    assert count(db, raw_table("gpu"), "WHERE ts < %s", [T]) == 0
    assert count(db, raw_table("gpu"), "WHERE ts >= %s", [T]) > 0  # the open hour stays
    stored_n = db.execute(f"SELECT sum(n) FROM {packed_table('gpu')}")[0][0]
    assert stored_n == sum(1 for r in raw["gpu"] if r[0] < T)
    assert pack_all(db) == {k: 0 for k in written}  # nothing left to pack


def test_history_reads_packed_spans_as_it_read_the_raw_rows(db: TierDb) -> None:
    seeded(db)
    ranges = [ACROSS_SPANS, (T - 900 - 300, T - 300), (T - 450, T + 30)]
    before = [rounded(read(db, *r)) for r in ranges]
    assert all(b["tier"] == "raw" for b in before)
    assert any(p[1] is not None for p in before[0]["series"]["util_gpu_pct"][0])
    pack_all(db)
    assert [rounded(read(db, *r)) for r in ranges] == before


def test_a_late_sample_inside_a_packed_span_is_rolled_up_with_the_packed_ones(
    db: TierDb,
) -> None:
    raw = seeded(db)
    pack_all(db)
    late = gpu_row(T - 1800 + 2, *GPU)  # between two stored samples (every 5 s)
    store_raw(db, {"gpu": [late]})
    mark(db, late[0])
    roll(db, NOW)
    minute = (*GPU, T - 1800)
    want = expected("gpu", [*raw["gpu"], late], 60, before=T)
    assert stored(db, "gpu", "1m")[minute] == want[minute]
    assert stored(db, "gpu", "1m")[minute][0] == 13  # 12 packed samples and the late one


def test_a_resent_sample_of_a_packed_span_is_counted_once(db: TierDb) -> None:
    raw = seeded(db)
    chart = rounded(read(db, *ACROSS_SPANS))
    pack_all(db)
    original = gpu_row(T - 3600 + 100, *GPU)
    resent = (original[0], *GPU, 999.0, None, 1.0, 2)  # other values: must not be read
    store_raw(db, {"gpu": [resent]})
    mark(db, resent[0])
    roll(db, NOW)
    minute = (*GPU, T - 3600 + 60)
    assert stored(db, "gpu", "1m")[minute] == expected("gpu", raw["gpu"], 60, before=T)[minute]
    assert rounded(read(db, *ACROSS_SPANS)) == chart


def test_the_next_pass_merges_late_data_and_drops_resends(db: TierDb) -> None:
    raw = seeded(db)
    pack_all(db)
    late = gpu_row(T - 1800 + 2, *GPU)
    resent = (float(T - 1800), *GPU, 999.0, None, 1.0, 2)
    store_raw(db, {"gpu": [late, resent]})
    chart = rounded(read(db, T - 1800 - 450, T - 1800 + 450))
    assert pack_all(db)["gpu"] == 1  # only the span (and GPU) that got rows
    assert count(db, raw_table("gpu"), "WHERE ts < %s", [T]) == 0
    rows = db.execute(
        f"SELECT n FROM {packed_table('gpu')} WHERE node_id = 1 AND gpu = 0 AND span_start = %s",
        [T - 3600],
    )
    assert rows == [(sum(1 for r in raw["gpu"] if T - 3600 <= r[0] < T and r[1:3] == GPU) + 1,)]
    assert rounded(read(db, T - 1800 - 450, T - 1800 + 450)) == chart


def test_a_pass_that_dies_before_commit_leaves_every_sample_readable_once(
    db: TierDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded(db)
    chart = rounded(read(db, *ACROSS_SPANS))
    raw_rows = count(db, raw_table("gpu"))

    def dies(*args: Any) -> None:
        raise RuntimeError("worker killed")

    monkeypatch.setattr(packed, "_free_raw", dies)
    with pytest.raises(RuntimeError):
        pack_all(db)
    assert count(db, packed_table("gpu")) == 0
    assert count(db, raw_table("gpu")) == raw_rows
    assert rounded(read(db, *ACROSS_SPANS)) == chart


def test_a_read_redone_when_a_pass_moved_its_rows_under_it(
    db: TierDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass that commits between a reader's staging and its read: the reader sees the
    packed rows changed and reads again, so it does not miss the span."""
    seeded(db)
    chart = rounded(read(db, *ACROSS_SPANS))
    stage = packed_read.stage_entity
    passes: list[dict[str, int]] = []

    def stage_then_pack(*args: Any) -> packed_read.Staged:
        staged = stage(*args)
        if not passes:
            passes.append(pack_all(db))
        return staged

    monkeypatch.setattr(packed_read, "stage_entity", stage_then_pack)
    assert rounded(read(db, *ACROSS_SPANS)) == chart
    assert passes and passes[0]["gpu"] > 0


def test_retention_removes_packed_spans_with_the_raw_horizon_unless_marked(
    db: TierDb,
) -> None:
    seeded(db)
    pack_all(db)
    mark(db, T - 3600 + 60, (2, 0))  # a pending recompute inside the second hour
    later = T + 3 * 3600 + 60  # raw kept 3 h: the first hour's spans are past it
    apply_retention(later + 3600, using=db.alias)
    left = db.execute(f"SELECT node_id, gpu, span_start FROM {packed_table('gpu')}")
    assert sorted(left) == [(2, 0, T - 3600)]


def test_nothing_is_packed_when_packing_is_off(db: TierDb, monkeypatch: pytest.MonkeyPatch) -> None:
    seeded(db)
    monkeypatch.setenv("FLEETWATCH_RAW_PACK_MINUTES", "0")
    assert pack_all(db) == {}
    assert count(db, packed_table("gpu")) == 0


def test_only_spans_the_minute_rollup_has_passed_are_packed(db: TierDb) -> None:
    seeded(db)
    db.execute("UPDATE fw_rollup_state SET done_until = %s WHERE tier = '1m'", [T - 60])
    assert pack_all(db)["gpu"] == 3  # the first hour only: the second is not summarised
    assert count(db, raw_table("gpu"), "WHERE ts >= %s AND ts < %s", [T - 3600, T]) > 0


def test_the_disk_of_packed_raw_rows_is_freed(db: TierDb) -> None:
    if db.vendor != "postgresql":
        pytest.skip("SQLite deletes the rows: its file keeps its pages for reuse")
    seeded(db)
    part = f"{raw_table('gpu')}_p" + _hour_suffix(T - 3600)
    size = "SELECT pg_total_relation_size(%s)"
    before = int(db.execute(size, [part])[0][0])
    pack_all(db)
    after = int(db.execute(size, [part])[0][0])
    never_written = f"{raw_table('gpu')}_p" + _hour_suffix(T - 5 * 3600)
    assert after < before / 4
    assert after == int(db.execute(size, [never_written])[0][0])  # as small as an empty one


def test_ingest_into_the_open_span_goes_on_while_a_pass_holds_a_sealed_one(db: TierDb) -> None:
    """The packer's ACCESS EXCLUSIVE lock on a sealed partition does not stop ingest's
    insert (INSERT … SELECT … ON CONFLICT into the parent) of current rows."""
    if db.vendor != "postgresql":
        pytest.skip("SQLite has one write lock: the packer's write step takes it briefly")
    seeded(db)
    part = f"{raw_table('gpu')}_p" + _hour_suffix(T - 3600)
    holder = connections[db.alias]
    with holder.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute(f"LOCK TABLE {part} IN ACCESS EXCLUSIVE MODE")
        try:
            import psycopg

            assert db.url is not None
            with psycopg.connect(db.url) as other:
                other.execute("SET lock_timeout = '2s'")
                other.execute(
                    f"INSERT INTO {raw_table('gpu')} (ts, node_id, gpu, util_gpu_pct)"
                    " SELECT * FROM (VALUES (%s::float8, 1, 0, 1.0)) v ON CONFLICT DO NOTHING",
                    [float(T + 40)],
                )
                other.commit()
        finally:
            cur.execute("ROLLBACK")
    assert count(db, raw_table("gpu"), "WHERE ts = %s", [float(T + 40)]) == 1


def _hour_suffix(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y%m%dt%H")


def test_history_answers_are_not_empty(db: TierDb) -> None:
    """Guard on the oracle itself: the compared charts hold numbers."""
    seeded(db)
    pack_all(db)
    points = read(db, *ACROSS_SPANS).series["energy_j"].points
    assert points and all(v is not None and math.isfinite(v) for _, v in points)


def test_with_remote_write_on_only_shipped_spans_are_packed(
    db: TierDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipper reads raw rows: a span it has not shipped stays raw."""
    from django.conf import settings

    from fleetwatch.remote_write_settings import RemoteWrite

    seeded(db)
    monkeypatch.setattr(settings, "REMOTE_WRITE", RemoteWrite(url="http://127.0.0.1:9/write"))
    assert pack_all(db)["gpu"] == 0  # no cursor yet: nothing shipped
    db.insert(
        "fleet_remotewritecursor",
        ("kind", "entity", "complete_until", "shipped_samples", "dropped_samples", "failures",
         "last_error"),
        [("gpu", "[]", float(T - 3600 + 30), 0, 0, 0, "")],
    )  # fmt: skip
    assert pack_all(db)["gpu"] == 3  # the first hour only
    assert count(db, raw_table("gpu"), "WHERE ts >= %s AND ts < %s", [T - 3600, T]) > 0


def test_undoing_the_migration_puts_packed_samples_back_into_the_raw_table(db: TierDb) -> None:
    raw = seeded(db)
    chart = rounded(read(db, *ACROSS_SPANS))
    pack_all(db)
    with connections[db.alias].cursor() as cur:
        restored = packed.unpack_to_raw(cur, "gpu")
    assert restored == sum(1 for r in raw["gpu"] if r[0] < T)
    db.execute(f"DELETE FROM {packed_table('gpu')}")
    assert count(db, raw_table("gpu")) == len(raw["gpu"])
    assert rounded(read(db, *ACROSS_SPANS)) == chart


def test_a_row_arriving_while_a_span_is_read_waits_for_the_next_pass(
    db: TierDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A late row landing between the pass's column count and its fetch, carrying a field
    no other row of the span has: the pass leaves the span, the next packs it whole."""
    seeded(db)
    late_ts = float(T - 1800 + 3)
    stream = packed._stream_raw
    arrived: list[bool] = []

    def arrives_then_streams(kind: str, span: packed.Span, *args: Any) -> Any:
        if kind == "gpu" and span.lo == T - 3600 and not arrived:
            db.insert(
                raw_table("gpu"), ("ts", "node_id", "gpu", "temp_gpu_c"), [(late_ts, *GPU, 77.0)]
            )
            arrived.append(True)
        yield from stream(kind, span, *args)

    monkeypatch.setattr(packed, "_stream_raw", arrives_then_streams)
    assert pack_all(db)["gpu"] == 3  # the first hour; the second waits
    assert count(db, raw_table("gpu"), "WHERE ts >= %s AND ts < %s", [T - 3600, T]) > 0
    assert pack_all(db)["gpu"] == 3
    assert count(db, raw_table("gpu"), "WHERE ts < %s", [T]) == 0
    temps = history("gpu", GPU, ["temp_gpu_c"], late_ts - 60, late_ts + 60, now=NOW, using=db.alias)
    assert [v for _, v in temps.series["temp_gpu_c"].points if v is not None] == [77.0]


def test_a_pass_past_its_budget_leaves_the_other_spans_to_the_next(
    db: TierDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeded(db)
    monkeypatch.setattr(packed, "PASS_BUDGET_S", 0.0)
    assert sum(pack_all(db).values()) == 0
    monkeypatch.undo()
    assert pack_all(db)["gpu"] == 6


def test_a_second_pass_while_one_runs_packs_nothing(db: TierDb) -> None:
    if db.vendor != "postgresql":
        pytest.skip("SQLite runs one maintenance worker process: no second pass")
    seeded(db)
    import psycopg

    assert db.url is not None
    with psycopg.connect(db.url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [packed._LOCK_KEY])
        assert sum(pack_all(db).values()) == 0
        # Released here, not by closing: a closed connection's backend lets its locks go
        # as it exits, a moment after the client has gone.
        other.execute("SELECT pg_advisory_unlock(%s)", [packed._LOCK_KEY])
    assert pack_all(db)["gpu"] == 6


def test_a_span_packed_before_a_metric_was_added_reads_it_as_null() -> None:
    """The catalogue grows at its end: an older span decodes with the new metric NULL."""
    older = packed.integer_flags("node")[:-1]
    samples = [(float(T), *range(len(older) - 1)), (float(T + 1), *range(len(older) - 1))]
    data = packed_codec.pack([list(c) for c in zip(*samples, strict=True)], older)
    decoded = packed.decode("node", data)
    assert [row[:-1] for row in decoded] == [tuple(float(v) for v in s) for s in samples]
    assert [row[-1] for row in decoded] == [None, None]


def read_in_pages(db: TierDb, monkeypatch: pytest.MonkeyPatch) -> packed.Span:
    """PostgreSQL only (SQLite reads a span in one query): the seeded series' first sealed
    hour, which a pass then reads in ~100 pages (3 GPUs' rows, 100 a page)."""
    if db.vendor != "postgresql":
        pytest.skip("SQLite reads a span in one query, holding back no one's cleanup")
    seeded(db)
    monkeypatch.setattr(packed, "FETCH_ROWS", 100)
    return next(s for s in packed.sealed_spans("gpu", using=db.alias) if s.lo == T - 3600)


def seq_scans(db: TierDb, table: str) -> int:
    rows = db.execute("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = %s", [table])
    return int(rows[0][0])


def test_a_span_is_read_along_its_key_not_scanned_again_for_each_page(
    db: TierDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A partition that has just filled has no planner statistics; without them PostgreSQL
    # read each page of the span by scanning and sorting the whole partition again.
    span = read_in_pages(db, monkeypatch)
    assert span.partition is not None
    # Statistics that lead the planner to a scan and a sort, as none at all did at scale.
    db.execute("SET random_page_cost = 100000")
    db.execute("SELECT pg_stat_force_next_flush()")
    before = seq_scans(db, span.partition)
    assert packed.pack_span("gpu", span, using=db.alias) == 3
    db.execute("SELECT pg_stat_force_next_flush()")
    partition = span.partition
    wait_until(lambda: seq_scans(db, partition) > before, 10, "the pass's scans counted")
    # The fields' count and the write step's check scan it; the ~100 pages do not.
    assert seq_scans(db, partition) - before <= 4
    db.execute("RESET random_page_cost")


def test_a_pass_holds_no_snapshot_between_the_pages_it_reads(
    db: TierDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A snapshot held for a whole span (seconds at 10,000 GPUs) kept PostgreSQL from pruning
    # the dead versions of every GPU's latest-state row, rewritten each second: 174 MB in a
    # 9-minute run. Between two pages the pass's backend must hold none (no backend_xmin).
    span = read_in_pages(db, monkeypatch)
    backend = db.execute("SELECT pg_backend_pid()")[0][0]
    holding: list[bool] = []
    fetch = packed._fetch
    assert db.url is not None
    with psycopg.connect(db.url, autocommit=True) as watcher:

        def watched(*args: Any) -> Any:
            for page in fetch(*args):
                row = watcher.execute(
                    "SELECT backend_xmin IS NOT NULL FROM pg_stat_activity WHERE pid = %s",
                    [backend],
                ).fetchone()
                holding.append(bool(row and row[0]))
                yield page

        monkeypatch.setattr(packed, "_fetch", watched)
        assert packed.pack_span("gpu", span, using=db.alias) == 3
    assert len(holding) > 10 and not any(holding)


def test_a_pass_whose_database_connection_drops_mid_read_loses_nothing_and_the_next_packs(
    db: TierDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The database restarts (or a proxy drops the connection) while a pass reads a span:
    # the pass fails, every sample stays where it was, and the worker's next task — after
    # Celery's check between tasks, which closes a connection that failed — packs the span.
    span = read_in_pages(db, monkeypatch)
    chart = rounded(read(db, *ACROSS_SPANS))
    raw_rows = count(db, raw_table("gpu"))
    backend = db.execute("SELECT pg_backend_pid()")[0][0]
    fetch = packed._fetch
    assert db.url is not None
    with psycopg.connect(db.url, autocommit=True) as admin:

        def dropped_after_a_page(*args: Any) -> Any:
            pages = fetch(*args)
            yield next(pages)
            admin.execute("SELECT pg_terminate_backend(%s)", [backend])
            yield from pages

        monkeypatch.setattr(packed, "_fetch", dropped_after_a_page)
        with pytest.raises(psycopg.OperationalError):  # the server ended the connection
            packed.pack_span("gpu", span, using=db.alias)
    monkeypatch.setattr(packed, "_fetch", fetch)
    connections[db.alias].close_if_unusable_or_obsolete()  # what Celery runs between tasks
    assert count(db, raw_table("gpu")) == raw_rows
    assert count(db, packed_table("gpu")) == 0
    assert packed.pack_span("gpu", span, using=db.alias) == 3
    assert rounded(read(db, *ACROSS_SPANS)) == chart
