"""Retention deletes what each tier no longer keeps, and nothing that was never
rolled up, on every tier."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from fleet.storage.retention import apply_retention
from tests.fleet.test_rollups import T, TierDb, fresh_db

HOUR = 3600
RAW_KEEP = settings.RETENTION_RAW_HOURS * HOUR
MINUTE_KEEP = settings.RETENTION_1M_HOURS * HOUR
HOUR_KEEP = settings.RETENTION_1H_HOURS * HOUR


@pytest.fixture
def db(
    tier: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[TierDb]:
    with fresh_db(tier, tmp_path, tmp_path_factory, django_db_blocker) as fresh:
        yield fresh


def raw_gpu(db: TierDb, start: float, stop: float, every: int = 60) -> None:
    rows = [(float(t), 1, 0, 50.0) for t in range(int(start), int(stop), every)]
    db.insert("fw_gpu_raw", ("ts", "node_id", "gpu", "util_gpu_pct"), rows)


def raw_node(db: TierDb, start: float, stop: float) -> None:
    rows = [(float(t), 1, 5.0) for t in range(int(start), int(stop), 60)]
    db.insert("fw_node_raw", ("ts", "node_id", "cpu_pct"), rows)


def rolled(db: TierDb, table: str, start: float, stop: float, every: int) -> None:
    rows = [(1, 0, t, 1) for t in range(int(start), int(stop), every)]
    db.insert(table, ("node_id", "gpu", "bucket", "n"), rows)


def covered(
    db: TierDb, tier: str, kind: str, done_until: float, dirty: float | None = None
) -> None:
    db.insert(
        "fw_rollup_state",
        ("tier", "kind", "done_until", "dirty_from"),
        [(tier, kind, int(done_until), None if dirty is None else int(dirty))],
    )


def event(db: TierDb, seq: int, ts: float) -> None:
    columns = ("source", "seq", "pos", "ts", "kind", "detail")
    db.insert("fleet_event", columns, [("node:test", seq, 0, ts, "xid", "")])


def oldest(db: TierDb, table: str, column: str) -> tuple[float, int]:
    low, count = db.execute(f"SELECT min({column}), count(*) FROM {table}")[0]
    return float(low), int(count)


def test_each_tier_keeps_exactly_its_retention_window(db: TierDb) -> None:
    raw_gpu(db, T - RAW_KEEP - 2 * HOUR, T)  # two hours past the window: many delete slices
    rolled(db, "fw_gpu_1m", T - MINUTE_KEEP - 6 * HOUR, T, 60)
    rolled(db, "fw_gpu_1h", T - HOUR_KEEP - 10 * 86400, T, HOUR)
    covered(db, "1m", "gpu", T)
    covered(db, "1h", "gpu", T)
    event(db, 1, T - HOUR_KEEP - 86400)
    event(db, 2, T - 86400)

    apply_retention(T, using=db.alias)

    assert oldest(db, "fw_gpu_raw", "ts") == (T - RAW_KEEP, RAW_KEEP // 60)
    assert oldest(db, "fw_gpu_1m", "bucket") == (T - MINUTE_KEEP, MINUTE_KEEP // 60)
    assert oldest(db, "fw_gpu_1h", "bucket") == (T - HOUR_KEEP, HOUR_KEEP // HOUR)
    assert db.execute("SELECT seq FROM fleet_event") == [(2,)]


def test_raw_samples_the_minute_rollup_has_not_covered_are_kept(db: TierDb) -> None:
    raw_gpu(db, T - 6 * HOUR, T)
    covered(db, "1m", "gpu", T - 5 * HOUR)  # the rollup stalled five hours ago
    raw_node(db, T - 6 * HOUR, T)  # the node rollup never ran at all

    apply_retention(T, using=db.alias)

    assert oldest(db, "fw_gpu_raw", "ts")[0] == T - 5 * HOUR
    assert oldest(db, "fw_node_raw", "ts") == (T - 6 * HOUR, 6 * 60)


def test_raw_samples_waiting_for_a_late_data_recompute_are_kept(db: TierDb) -> None:
    raw_gpu(db, T - 6 * HOUR, T)
    covered(db, "1m", "gpu", T, dirty=T - 4 * HOUR)  # late data landed four hours back

    apply_retention(T, using=db.alias)

    assert oldest(db, "fw_gpu_raw", "ts")[0] == T - 4 * HOUR


def test_minutes_the_hour_rollup_has_not_covered_are_kept(db: TierDb) -> None:
    rolled(db, "fw_gpu_1m", T - MINUTE_KEEP - 6 * HOUR, T, 60)
    covered(db, "1h", "gpu", T - MINUTE_KEEP - 2 * HOUR)

    apply_retention(T, using=db.alias)

    assert oldest(db, "fw_gpu_1m", "bucket")[0] == T - MINUTE_KEEP - 2 * HOUR
