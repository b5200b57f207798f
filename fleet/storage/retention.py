"""Retention: remove what each storage tier no longer needs to keep.

Raw rows go after RETENTION_RAW_HOURS, 1-minute rows after RETENTION_1M_HOURS, 1-hour rows
after RETENTION_1H_HOURS (gpu, node) or RETENTION_FACILITY_1H_HOURS (rack, feed, loop,
facility: kept for an annual PUE), events after RETENTION_1H_HOURS. Nothing is removed
before the tier above summarised it: not past that tier's `done_until`, and not where a
pending late mark of that tier (`fw_<kind>_late`) still asks for a recompute.

- PostgreSQL: raw and rollup tables are partitioned by time (`fleet.storage.partitions`), so
  a partition goes as a whole once all of its range qualifies: `DETACH PARTITION …
  CONCURRENTLY` (it waits for transactions using the partition but blocks no insert into
  the others), a second look for marks (none can arrive once it is detached), then `DROP`.
  Nothing an ingest commit needs is held, and no row is rewritten.
- SQLite: short DELETE slices, oldest first, each its own transaction, so a large backlog
  never holds the single write lock for long; rows a pending mark covers are left (anti-join).
- Packed raw spans (`fw_<kind>_packed`, fleet.storage.packed): a span goes with the raw
  rows it replaced, once all of it is past the raw horizon and no pending 1m mark covers
  its entity inside it; DELETE on both engines (a few rows per entity and span).
- Events (`fleet_event`, not partitioned): DELETE slices on both engines; so are the
  stored ledger's hours and days, and shared GPUs' SM activity per minute
  (`fw_gpu_share_1m`, kept as long as the 1-minute GPU tier), and GPUs' health hours
  (`fw_gpu_health_1h`, as long as the hourly GPU tier).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from agents.protocol.metrics import METRICS
from fleet.storage import health_hours
from fleet.storage.dialect import WriterTurns
from fleet.storage.late import late_table
from fleet.storage.partitions import (
    MINVALUE,
    Family,
    Partition,
    attach_sql,
    django_runner,
    families,
    list_partitions,
)
from fleet.storage.schema import ENTITY_COLUMNS, packed_table
from fleet.storage.workloads import SHARE_TABLE

log = logging.getLogger(__name__)

HOUR_S = 3600.0

# Kinds whose hourly history is kept for an annual PUE (ISO/IEC 30134-2 takes 12 months).
FACILITY_KINDS = frozenset({"rack", "feed", "loop", "facility"})

# The tier that summarises each tier, and the span one of its late marks covers.
SUMMARISED_BY = {"raw": "1m", "1m": "1h"}
MARK_SPAN_S = {"raw": 60, "1m": 3600}

# SQLite: width of one delete slice per table, in its time unit (seconds), about 30k rows
# each for a 512-GPU fleet at 1 Hz (raw: 1 min; 1m: 1 h; 1h: 1 day; events: 1 h).
SLICE_S = {"raw": 60, "1m": 3600, "1h": 86400, "event": 3600, "ledger_1h": 3600, "ledger_1d": 86400}

# The energy ledger's stored hours live as long as the hourly GPU tier they were read from;
# its days as long as the facility's hours, so yearly ledgers and the 12-month PUE agree.
LEDGER_TABLES = {"ledger_1h": ("fw_ledger_1h", "gpu"), "ledger_1d": ("fw_ledger_1d", "facility")}

# PostgreSQL still deletes events by slice; it locks rows, not the database, so wider
# slices only save scans.
PG_SLICE_FACTOR = 60

_NO_LOWER_BOUND = -(2**62)


def kept_s(tier: str, kind: str) -> float:
    """How long `tier` of `kind` is kept, in seconds (events: as GPU hours)."""
    if tier == "raw":
        hours = settings.RETENTION_RAW_HOURS
    elif tier == "1m":
        hours = settings.RETENTION_1M_HOURS
    elif kind in FACILITY_KINDS:
        hours = settings.RETENTION_FACILITY_1H_HOURS
    else:
        hours = settings.RETENTION_1H_HOURS
    return float(hours) * HOUR_S


def summarised_until(cur: Any, tier: str, kind: str) -> float | None:
    """How far `tier` has summarised its source (None: it never ran, so nothing is).

    Read by column name: a `dirty_from` that still exists and is set holds it back."""
    cur.execute("SELECT * FROM fw_rollup_state WHERE tier = %s AND kind = %s", [tier, kind])
    row = cur.fetchone()
    if row is None:
        return None
    state = dict(zip((d[0] for d in cur.description), row, strict=True))
    done = float(state["done_until"])
    dirty = state.get("dirty_from")
    return done if dirty is None else min(done, float(dirty))


def removable_before(cur: Any, family: Family, now: float) -> float | None:
    """Rows of `family` before this time may go (pending marks aside); None: keep all."""
    limit = now - kept_s(family.tier, family.kind)
    above = SUMMARISED_BY.get(family.tier)
    if above is None:
        return limit
    covered = summarised_until(cur, above, family.kind)
    return None if covered is None else min(limit, covered)


def _has_table(cur: Any, name: str, vendor: str) -> bool:
    if vendor == "postgresql":
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
    else:
        cur.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = %s", [name])
    return bool(cur.fetchone()[0])


# -- PostgreSQL: whole partitions ---------------------------------------------------------


def _marked(cur: Any, family: Family, lo: float, hi: float) -> bool:
    """Does a pending mark of the tier above ask for rows in [lo, hi)?"""
    above = SUMMARISED_BY.get(family.tier)
    if above is None or not _has_table(cur, late_table(family.kind), "postgresql"):
        return False
    span = MARK_SPAN_S[family.tier]
    low = _NO_LOWER_BOUND if lo == MINVALUE else int(lo) - span
    cur.execute(
        f"SELECT EXISTS (SELECT 1 FROM {late_table(family.kind)}"
        " WHERE tier = %s AND bucket < %s AND bucket > %s)",
        [above, int(hi), low],
    )
    return bool(cur.fetchone()[0])


def _expired(cur: Any, family: Family, part: Partition, now: float) -> bool:
    limit = removable_before(cur, family, now)
    return limit is not None and part.hi <= limit and not _marked(cur, family, part.lo, part.hi)


def _detach(cur: Any, part: Partition, concurrently: bool) -> None:
    how = "FINALIZE" if part.detach_pending else ("CONCURRENTLY" if concurrently else "")
    cur.execute(f"ALTER TABLE {part.parent} DETACH PARTITION {part.name} {how}")


def _drop_partition(family: Family, part: Partition, now: float, using: str) -> bool:
    """Detach and drop `part` if all of it has expired and been summarised. Returns dropped."""
    conn = connections[using]
    # CONCURRENTLY cannot run inside a transaction block.
    concurrently = not conn.in_atomic_block
    with conn.cursor() as cur:
        if not part.detach_pending and not _expired(cur, family, part, now):
            return False
        _detach(cur, part, concurrently)
        # Detached: no transaction can add rows or marks for it any more, so this second
        # look is final. A mark that landed meanwhile (a commit in flight while the horizon
        # passed) puts it back; DETACH CONCURRENTLY left a CHECK that spares ATTACH its scan.
        if not _expired(cur, family, part, now):
            log.info("retention: %s is needed again, attaching it back", part.name)
            cur.execute(attach_sql(part.parent, part.name, part.lo, part.hi))
            return False
        cur.execute(f"DROP TABLE {part.name}")
    return True


def drop_expired_partitions(now: float, using: str = DEFAULT_DB_ALIAS) -> dict[str, int]:
    """PostgreSQL: partitions dropped per table."""
    tables = [f.table for f in families()]
    existing = django_runner(using)(lambda ex: list_partitions(ex, tables))
    dropped: dict[str, int] = {}
    for family in families():
        with connections[using].cursor() as cur:
            limit = removable_before(cur, family, now)
        # A detach left pending by an interrupted pass is finished (or undone) first.
        candidates = [
            p
            for p in existing[family.table]
            if p.detach_pending or (limit is not None and p.hi <= limit)
        ]
        dropped[family.table] = sum(_drop_partition(family, p, now, using) for p in candidates)
    return dropped


# -- SQLite (and events): DELETE slices --------------------------------------------------


def _unmarked(family: Family) -> str:
    """A WHERE fragment sparing rows a pending mark of the tier above covers."""
    keys = " AND ".join(f"l.{k} = t.{k}" for k in ENTITY_COLUMNS[family.kind])
    col = family.column
    return (
        f" AND NOT EXISTS (SELECT 1 FROM {late_table(family.kind)} l WHERE l.tier ="
        f" '{SUMMARISED_BY[family.tier]}' AND {keys} AND t.{col} >= l.bucket"
        f" AND t.{col} < l.bucket + {MARK_SPAN_S[family.tier]})"
    )


def delete_expired_rows(family: Family, now: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """Delete expired, summarised, unmarked rows of `family`, one slice per transaction."""
    conn = connections[using]
    with conn.cursor() as cur:
        marks = family.tier in SUMMARISED_BY and _has_table(
            cur, late_table(family.kind), conn.vendor
        )
    spare = _unmarked(family) if marks else ""

    def limit() -> float | None:
        # Re-read in each slice's transaction: on SQLite that is ordered with the ingest
        # writer's commits by the write lock (IMMEDIATE transactions), without a row lock.
        with conn.cursor() as cur:
            return removable_before(cur, family, now)

    return _delete_slices(family.table, family.column, SLICE_S[family.tier], using, limit, spare)


def _delete_slices(
    table: str,
    column: str,
    slice_s: float,
    using: str,
    limit: Callable[[], float | None],
    spare: str = "",
) -> int:
    conn = connections[using]
    if conn.vendor == "postgresql":
        slice_s *= PG_SLICE_FACTOR
    deleted = 0
    turns = WriterTurns(conn.vendor)  # SQLite: let the ingest writer in between slices
    lo: float | None = _oldest(table, column, None, limit(), using)
    while lo is not None:
        started = time.monotonic()
        with transaction.atomic(using=using), conn.cursor() as cur:
            upper = limit()
            if upper is None or upper <= lo:
                return deleted
            hi = min(upper, lo + slice_s)
            cur.execute(
                f"DELETE FROM {table} AS t WHERE t.{column} >= %s AND t.{column} < %s{spare}",
                [lo, hi],
            )
            deleted += max(cur.rowcount, 0)
        turns.took(time.monotonic() - started)
        lo = _oldest(table, column, hi, upper, using)
    return deleted


def _oldest(
    table: str, column: str, since: float | None, before: float | None, using: str
) -> float | None:
    """The oldest `column` in [since, before), or None."""
    if before is None:
        return None
    where = f"{column} < %s" + ("" if since is None else f" AND {column} >= %s")
    params = [before] if since is None else [before, since]
    with connections[using].cursor() as cur:
        cur.execute(f"SELECT min({column}) FROM {table} WHERE {where}", params)
        row = cur.fetchone()
    return None if row is None or row[0] is None else float(row[0])


def delete_expired_packed(kind: str, now: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """Packed spans of `kind` wholly past the raw horizon, sparing any a pending 1m mark
    covers (its entity and a minute inside the span): the raw contract, per span."""
    keys = " AND ".join(f"l.{k} = t.{k}" for k in ENTITY_COLUMNS[kind])
    with transaction.atomic(using=using), connections[using].cursor() as cur:
        limit = removable_before(cur, Family(kind, "raw"), now)
        if limit is None:
            return 0
        cur.execute(
            f"DELETE FROM {packed_table(kind)} AS t WHERE t.span_end <= %s AND NOT EXISTS"
            f" (SELECT 1 FROM {late_table(kind)} l WHERE l.tier = '1m' AND {keys}"
            " AND l.bucket >= t.span_start AND l.bucket < t.span_end)",
            [limit],
        )
        return max(int(cur.rowcount), 0)


def delete_expired_events(now: float, using: str = DEFAULT_DB_ALIAS) -> int:
    cutoff = now - float(settings.RETENTION_1H_HOURS) * HOUR_S
    return _delete_slices("fleet_event", "ts", SLICE_S["event"], using, lambda: cutoff)


def delete_expired_ledger(now: float, using: str = DEFAULT_DB_ALIAS) -> dict[str, int]:
    """The energy ledger's stored hours and days past their horizon; rows per table."""
    deleted = {}
    for slice_key, (table, kind) in LEDGER_TABLES.items():
        deleted[table] = _delete_slices(
            table, "bucket", SLICE_S[slice_key], using, functools.partial(_horizon, now, kind)
        )
    return deleted


def delete_expired_shares(now: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """Shared GPUs' SM activity per minute (workloads.SHARE_TABLE) past the 1-minute GPU
    tier's horizon: the ledger reads it with those minutes only. Rows deleted."""
    cutoff = now - kept_s("1m", "gpu")
    return _delete_slices(SHARE_TABLE, "bucket", SLICE_S["1m"], using, lambda: cutoff)


def delete_expired_health_hours(now: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """GPUs' health hours (health_hours.TABLE) past the hourly GPU tier's horizon: they
    were read from those hours. Rows deleted."""
    cutoff = _horizon(now, "gpu")
    return _delete_slices(health_hours.TABLE, "bucket", SLICE_S["1h"], using, lambda: cutoff)


def _horizon(now: float, kind: str) -> float:
    return now - kept_s("1h", kind)


def apply_retention(now: float, using: str = DEFAULT_DB_ALIAS) -> dict[str, int]:
    """Trim every tier as of `now`. Returns, per table, rows deleted (SQLite, events) or
    partitions dropped (PostgreSQL, key `<table> partitions`)."""
    removed: dict[str, int] = {}
    if connections[using].vendor == "postgresql":
        for table, count in drop_expired_partitions(now, using).items():
            removed[f"{table} partitions"] = count
    else:
        for family in families():
            if family.kind in METRICS:
                removed[family.table] = delete_expired_rows(family, now, using)
    for kind in METRICS:
        removed[packed_table(kind)] = delete_expired_packed(kind, now, using)
    removed["fleet_event"] = delete_expired_events(now, using)
    removed.update(delete_expired_ledger(now, using))
    removed[SHARE_TABLE] = delete_expired_shares(now, using)
    removed[health_hours.TABLE] = delete_expired_health_hours(now, using)
    return removed
