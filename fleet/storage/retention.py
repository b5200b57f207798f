"""Retention: delete what each storage tier no longer needs to keep.

Raw rows go after RETENTION_RAW_HOURS, 1-minute rows after RETENTION_1M_HOURS,
1-hour rows and events after RETENTION_1H_HOURS. A tier is never trimmed past
what the tier above it has rolled up (`done_until`, or `dirty_from` while a late
range waits to be recomputed): data that was never summarised is kept until it
is, whatever its age.

Deletes go oldest-first in short slices, each its own transaction, so a large
backlog (retention switched on late, a shorter setting) never holds SQLite's
single write lock for long; the ingest writer gets it between slices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from agents.protocol.metrics import METRICS
from fleet.storage.dialect import share_lock
from fleet.storage.rollups import read_state
from fleet.storage.schema import raw_table, rollup_table

# Width of one delete slice per table, in its time unit (seconds): about 30k
# rows each for a 512-GPU fleet at 1 Hz (raw: 1 min; 1m: 1 h; 1h: 1 day).
SLICE_S = {"raw": 60, "1m": 3600, "1h": 86400, "event": 3600}

# PostgreSQL locks rows, not the database, so slices only bound transaction size
# there; wider ones save a scan each (raw has no index on ts alone: measured 0.7 s
# per slice on 3 h of a 512-GPU fleet).
PG_SLICE_FACTOR = 60

# Pause between slices: SQLite's busy handler does not queue waiters, so
# without it a long delete could win the lock back before the writer retries.
_YIELD_S = 0.005


@dataclass(frozen=True, slots=True)
class Cutoffs:
    raw: float
    one_minute: float
    one_hour: float


def cutoffs(now: float) -> Cutoffs:
    return Cutoffs(
        raw=now - float(settings.RETENTION_RAW_HOURS) * 3600,
        one_minute=now - float(settings.RETENTION_1M_HOURS) * 3600,
        one_hour=now - float(settings.RETENTION_1H_HOURS) * 3600,
    )


def _covered_until(tier: str, kind: str, using: str) -> float | None:
    """How far `tier` has rolled up its source for good; None if it never ran."""
    with connections[using].cursor() as cur:
        state = read_state(cur, tier, kind)
    return None if state is None else float(state.start)


def delete_before(
    table: str,
    column: str,
    cutoff: float,
    slice_s: float,
    using: str,
    covered_by: tuple[str, str] | None = None,
) -> int:
    """Delete rows with `column` < `cutoff`, oldest first, one slice per transaction.

    With `covered_by=(tier, kind)`, each slice also stops where that tier's rollup has
    covered its source, read again *inside* the slice's transaction: late data acked
    while a pass runs marks its minute dirty, and must not be deleted before it is
    rolled up (SQLite's IMMEDIATE transactions and PostgreSQL's FOR SHARE on the state
    row order the delete after the writer's commit).
    """
    conn = connections[using]
    if conn.vendor == "postgresql":
        slice_s *= PG_SLICE_FACTOR
    deleted = 0
    while True:
        with conn.cursor() as cur:
            cur.execute(f"SELECT min({column}) FROM {table} WHERE {column} < %s", [cutoff])
            row = cur.fetchone()
        oldest = None if row is None else row[0]
        if oldest is None:
            return deleted
        upper = min(cutoff, float(oldest) + slice_s)
        with transaction.atomic(using=using), conn.cursor() as cur:
            if covered_by is not None:
                covered = _covered_locked(cur, *covered_by, conn.vendor)
                if covered is None or covered <= float(oldest):
                    return deleted
                upper = min(upper, covered)
            cur.execute(f"DELETE FROM {table} WHERE {column} < %s", [upper])
            deleted += max(cur.rowcount, 0)
        time.sleep(_YIELD_S)


def _covered_locked(cur: Any, tier: str, kind: str, vendor: str) -> float | None:
    lock = share_lock(vendor)
    cur.execute(
        f"SELECT done_until, dirty_from FROM fw_rollup_state WHERE tier = %s AND kind = %s{lock}",
        [tier, kind],
    )
    row = cur.fetchone()
    if row is None:
        return None
    done, dirty = row
    return float(done if dirty is None else min(done, dirty))


def apply_retention(now: float, using: str = DEFAULT_DB_ALIAS) -> dict[str, int]:
    """Trim every tier as of `now`. Returns rows deleted per table."""
    cut = cutoffs(now)
    deleted: dict[str, int] = {}
    for kind in METRICS:
        raw_covered = _covered_until("1m", kind, using)
        if raw_covered is not None:
            table = raw_table(kind)
            limit = min(cut.raw, raw_covered)
            deleted[table] = delete_before(
                table, "ts", limit, SLICE_S["raw"], using, covered_by=("1m", kind)
            )
        minute_covered = _covered_until("1h", kind, using)
        if minute_covered is not None:
            table = rollup_table(kind, "1m")
            limit = min(cut.one_minute, minute_covered)
            deleted[table] = delete_before(
                table, "bucket", limit, SLICE_S["1m"], using, covered_by=("1h", kind)
            )
        table = rollup_table(kind, "1h")
        deleted[table] = delete_before(table, "bucket", cut.one_hour, SLICE_S["1h"], using)
    deleted["fleet_event"] = delete_before(
        "fleet_event", "ts", cut.one_hour, SLICE_S["event"], using
    )
    return deleted
