"""Retention removes what each tier no longer keeps, and nothing that was never rolled up,
on every tier: SQLite deletes rows, PostgreSQL drops whole time partitions (so there it keeps
everything from the start of the partition that holds the cut-off)."""

from __future__ import annotations

import pytest
from django.conf import settings

from fleet.storage.partitions import (
    describe,
    ensure_partitions,
    slot,
)
from fleet.storage.retention import apply_retention
from fleet.storage.schema import ENTITY_COLUMNS
from tests.support import databases
from tests.support.databases import T, TierDb, cover_test_clock

HOUR = 3600
DAY = 86400
RAW_KEEP = settings.RETENTION_RAW_HOURS * HOUR
MINUTE_KEEP = settings.RETENTION_1M_HOURS * HOUR
HOUR_KEEP = settings.RETENTION_1H_HOURS * HOUR
FACILITY_HOUR_KEEP = settings.RETENTION_FACILITY_1H_HOURS * HOUR

# How far before the test clock T each tier's tests write.
_BEHIND = {"raw": 12 * HOUR, "1m": MINUTE_KEEP + 7 * DAY, "1h": FACILITY_HOUR_KEEP + 40 * DAY}


fresh_tier_db = databases.fresh_tier_db


@pytest.fixture
def db(fresh_tier_db: TierDb) -> TierDb:
    """Each test's own database, with partitions as far behind T as its tier's tests write,
    for the kinds they write (only those: each test stays quick)."""
    cover_test_clock(fresh_tier_db, ("gpu", "node", "facility"), behind=_BEHIND)
    return fresh_tier_db


def kept_from(db: TierDb, tier: str, cutoff: float) -> float:
    """The oldest time a tier keeps for `cutoff`: SQLite deletes rows up to it; PostgreSQL
    keeps the whole partition that holds it."""
    return float(cutoff if db.vendor == "sqlite" else slot(tier, cutoff)[0])


def raw_gpu(db: TierDb, start: float, stop: float, every: int = 60) -> None:
    rows = [(float(t), 1, 0, 50.0) for t in range(int(start), int(stop), every)]
    db.insert("fw_gpu_raw", ("ts", "node_id", "gpu", "util_gpu_pct"), rows)


def raw_node(db: TierDb, start: float, stop: float) -> None:
    rows = [(float(t), 1, 5.0) for t in range(int(start), int(stop), 60)]
    db.insert("fw_node_raw", ("ts", "node_id", "cpu_pct"), rows)


def rolled(db: TierDb, table: str, start: float, stop: float, every: int) -> None:
    rows = [(1, 0, t, 1) for t in range(int(start), int(stop), every)]
    db.insert(table, ("node_id", "gpu", "bucket", "n"), rows)


def covered(db: TierDb, tier: str, kind: str, done_until: float) -> None:
    db.insert(
        "fw_rollup_state",
        ("tier", "kind", "done_until"),
        [(tier, kind, int(done_until))],
    )


def late_mark(db: TierDb, tier: str, node: int, gpu: int, bucket: float) -> None:
    db.insert("fw_gpu_late", ("node_id", "gpu", "tier", "bucket"), [(node, gpu, tier, int(bucket))])


def event(db: TierDb, seq: int, ts: float) -> None:
    columns = ("source", "seq", "pos", "ts", "kind", "detail")
    db.insert("fleet_event", columns, [("node:test", seq, 0, ts, "xid", "")])


def oldest(db: TierDb, table: str, column: str, where: str = "1=1") -> tuple[float, int]:
    low, count = db.execute(f"SELECT min({column}), count(*) FROM {table} WHERE {where}")[0]
    return float(low), int(count)


def test_each_tier_keeps_its_retention_window(db: TierDb) -> None:
    raw_gpu(db, T - RAW_KEEP - 2 * HOUR, T)  # two hours past the window: many delete slices
    rolled(db, "fw_gpu_1m", T - MINUTE_KEEP - 2 * DAY, T, 60)
    rolled(db, "fw_gpu_1h", T - HOUR_KEEP - 40 * DAY, T, HOUR)
    covered(db, "1m", "gpu", T)
    covered(db, "1h", "gpu", T)
    event(db, 1, T - HOUR_KEEP - DAY)
    event(db, 2, T - DAY)

    apply_retention(T, using=db.alias)

    raw_from = kept_from(db, "raw", T - RAW_KEEP)
    minute_from = kept_from(db, "1m", T - MINUTE_KEEP)
    hour_from = kept_from(db, "1h", T - HOUR_KEEP)
    assert oldest(db, "fw_gpu_raw", "ts") == (raw_from, (T - raw_from) // 60)
    assert oldest(db, "fw_gpu_1m", "bucket") == (minute_from, (T - minute_from) // 60)
    assert oldest(db, "fw_gpu_1h", "bucket") == (hour_from, (T - hour_from) // HOUR)
    assert db.execute("SELECT seq FROM fleet_event") == [(2,)]


def test_raw_samples_the_minute_rollup_has_not_covered_are_kept(db: TierDb) -> None:
    raw_gpu(db, T - 6 * HOUR, T)
    covered(db, "1m", "gpu", T - 5 * HOUR)  # the rollup stalled five hours ago
    raw_node(db, T - 6 * HOUR, T)  # the node rollup never ran at all

    apply_retention(T, using=db.alias)

    assert oldest(db, "fw_gpu_raw", "ts")[0] == T - 5 * HOUR
    assert oldest(db, "fw_node_raw", "ts") == (T - 6 * HOUR, 6 * 60)


def test_raw_samples_waiting_for_a_late_mark_are_kept_until_the_rollup_took_it(
    db: TierDb,
) -> None:
    raw_gpu(db, T - 6 * HOUR, T)
    raw_gpu_other = [(float(t), 2, 0, 70.0) for t in range(T - 6 * HOUR, T, 60)]
    db.insert("fw_gpu_raw", ("ts", "node_id", "gpu", "util_gpu_pct"), raw_gpu_other)
    covered(db, "1m", "gpu", T)
    late_mark(db, "1m", 1, 0, T - 4 * HOUR)  # GPU 1/0's minute four hours back: redo it

    apply_retention(T, using=db.alias)

    marked = f"node_id = 1 AND ts >= {T - 4 * HOUR} AND ts < {T - 4 * HOUR + 60}"
    assert oldest(db, "fw_gpu_raw", "ts", marked) == (T - 4 * HOUR, 1)
    assert oldest(db, "fw_gpu_raw", "ts")[0] == T - 4 * HOUR  # the older hours went

    db.execute("DELETE FROM fw_gpu_late")  # the rollup consumed it
    apply_retention(T, using=db.alias)

    assert oldest(db, "fw_gpu_raw", "ts")[0] == T - RAW_KEEP
    assert db.execute(f"SELECT count(*) FROM fw_gpu_raw WHERE {marked}") == [(0,)]


def test_minutes_the_hour_rollup_has_not_covered_are_kept(db: TierDb) -> None:
    rolled(db, "fw_gpu_1m", T - MINUTE_KEEP - 6 * DAY, T, 60)
    covered(db, "1h", "gpu", T - MINUTE_KEEP - 2 * DAY)

    apply_retention(T, using=db.alias)

    assert oldest(db, "fw_gpu_1m", "bucket")[0] == kept_from(db, "1m", T - MINUTE_KEEP - 2 * DAY)


def test_minutes_waiting_for_a_late_hour_mark_are_kept(db: TierDb) -> None:
    rolled(db, "fw_gpu_1m", T - MINUTE_KEEP - 3 * DAY, T, 60)
    covered(db, "1h", "gpu", T)
    hour = T - MINUTE_KEEP - 2 * DAY
    late_mark(db, "1h", 1, 0, hour)

    apply_retention(T, using=db.alias)

    assert oldest(db, "fw_gpu_1m", "bucket")[0] == kept_from(db, "1m", hour)
    marked = f"bucket >= {hour} AND bucket < {hour + HOUR}"
    assert db.execute(f"SELECT count(*) FROM fw_gpu_1m WHERE {marked}") == [(60,)]


def test_sqlite_tables_are_not_partitioned_so_there_are_none_to_make(db: TierDb) -> None:
    if db.vendor != "sqlite":
        pytest.skip("PostgreSQL partitions: tests/fleet/test_partitions.py")

    assert ensure_partitions(T, using=db.alias) == []
    assert describe(using=db.alias) == []


def test_site_energy_hours_go_after_400_days_while_gpu_and_node_hours_keep_90(
    db: TierDb,
) -> None:
    assert (FACILITY_HOUR_KEEP, HOUR_KEEP) == (400 * DAY, 90 * DAY)  # the defaults
    cover_test_clock(db, ("rack", "feed", "loop"), behind={"1h": _BEHIND["1h"]})
    # days before T; 435: a month older, so a whole PostgreSQL partition goes too
    ages = (89, 91, 399, 401, 435)
    site_kinds = ("facility", "rack", "feed", "loop")
    for kind in (*site_kinds, "gpu", "node"):
        keys = ENTITY_COLUMNS[kind]
        rows = [(*([1] * len(keys)), T - age * DAY, 60) for age in ages]
        db.insert(f"fw_{kind}_1h", (*keys, "bucket", "n"), rows)

    apply_retention(T, using=db.alias)

    def ages_left(table: str) -> set[int]:
        return {(T - int(b)) // DAY for (b,) in db.execute(f"SELECT bucket FROM {table}")}

    def oracle(keep: float) -> set[int]:
        return {a for a in ages if T - a * DAY >= kept_from(db, "1h", T - keep)}

    for kind in site_kinds:
        assert ages_left(f"fw_{kind}_1h") == oracle(FACILITY_HOUR_KEEP), kind
        assert {89, 91, 399} <= ages_left(f"fw_{kind}_1h") and 435 not in oracle(FACILITY_HOUR_KEEP)
    for kind in ("gpu", "node"):
        assert ages_left(f"fw_{kind}_1h") == oracle(HOUR_KEEP), kind
    if db.vendor == "sqlite":  # rows, not whole partitions: the cut-off to the second
        assert ages_left("fw_facility_1h") == {89, 91, 399}
        assert ages_left("fw_gpu_1h") == {89}
