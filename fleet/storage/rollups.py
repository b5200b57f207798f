"""1-minute and 1-hour rollups of the raw time-series tables.

`rollup(tier, kind, now)` computes every complete bucket from the tier's
`done_until` (or its `dirty_from`, when late data arrived for buckets already
covered) up to the last bucket that ended at least `GRACE_S` before `now`, then
advances `done_until` and clears `dirty_from`. 1m reads the raw table, 1h reads
the 1m table. All of it is set-based SQL through Django's connection, one code
path for SQLite and PostgreSQL; only the bucket expression differs.

Safe to run from two workers at once: each chunk first claims the state row with
a conditional UPDATE (`WHERE done_until = <what I read>`) and gives up the chunk
when the rowcount says another worker moved it. On PostgreSQL that UPDATE also
row-locks the state, so the ingest writer's "mark dirty" waits for the commit and
then compares against the new `done_until`; on SQLite the whole chunk holds the
write lock (BEGIN IMMEDIATE), which serialises it with the writer anyway.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.utils import CursorWrapper

from agents.protocol.metrics import METRICS
from fleet.storage.dialect import bucket_expr, rollup_preamble
from fleet.storage.schema import ENTITY_COLUMNS, TIER_SECONDS, raw_table, rollup_table

log = logging.getLogger(__name__)

# Batches still in flight (agent buffering, writer group commit) land within
# seconds; a bucket is only rolled up once it ended this long ago.
GRACE_S = 10.0

# Buckets per transaction: bounds how long one chunk holds SQLite's write lock,
# which the ingest writer shares. Measured here: one minute of a 512-GPU fleet at
# 1 Hz (30k raw rows) rolls up in 0.15-0.25 s, so a catch-up chunk holds the lock
# for about a second; the steady 30 s beat computes one minute at a time.
MAX_BUCKETS_PER_CHUNK = {"1m": 5, "1h": 6}

# How often a chunk is re-read and re-claimed after losing a race before the
# run leaves the rest to the next beat tick.
_CLAIM_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class State:
    done_until: int
    dirty_from: int | None

    @property
    def start(self) -> int:
        """The oldest bucket that still needs computing."""
        if self.dirty_from is None:
            return self.done_until
        return min(self.done_until, self.dirty_from)


def metric_names(kind: str) -> tuple[str, ...]:
    return tuple(m.name for m in METRICS[kind])


def _floor(value: float, step: int) -> int:
    return int(value // step) * step


def _source(tier: str, kind: str) -> tuple[str, str]:
    """(table, time column) that a tier is computed from."""
    if tier == "1m":
        return raw_table(kind), "ts"
    return rollup_table(kind, "1m"), "bucket"


def read_state(cur: CursorWrapper, tier: str, kind: str) -> State | None:
    cur.execute(
        "SELECT done_until, dirty_from FROM fw_rollup_state WHERE tier = %s AND kind = %s",
        [tier, kind],
    )
    row = cur.fetchone()
    if row is None:
        return None
    return State(int(row[0]), None if row[1] is None else int(row[1]))


def claim(cur: CursorWrapper, tier: str, kind: str, seen: State) -> bool:
    """Take the state row for this chunk, only if nobody moved it since `seen` was read.

    A no-op UPDATE whose rowcount is the answer (healthchecks' `sendalerts` style);
    the -1 stands in for NULL so one statement works on both engines.
    """
    cur.execute(
        "UPDATE fw_rollup_state SET done_until = done_until WHERE tier = %s AND kind = %s"
        " AND done_until = %s AND COALESCE(dirty_from, -1) = %s",
        [tier, kind, seen.done_until, -1 if seen.dirty_from is None else seen.dirty_from],
    )
    return bool(cur.rowcount == 1)


def _first_state(cur: CursorWrapper, tier: str, kind: str) -> State | None:
    """First run: start at the oldest source bucket. None while there is no data."""
    table, col = _source(tier, kind)
    cur.execute(f"SELECT min({col}) FROM {table}")
    oldest = cur.fetchone()[0]
    if oldest is None:
        return None
    start = _floor(oldest, TIER_SECONDS[tier])
    # Two first runs at once both try; the loser's insert is a no-op.
    cur.execute(
        "INSERT INTO fw_rollup_state (tier, kind, done_until, dirty_from) VALUES (%s, %s, %s, NULL)"
        " ON CONFLICT (tier, kind) DO NOTHING",
        [tier, kind, start],
    )
    return read_state(cur, tier, kind)


def _end(cur: CursorWrapper, tier: str, kind: str, now: float) -> int:
    """Exclusive end of the complete buckets this tier may compute now."""
    if tier == "1m":
        return _floor(now - GRACE_S, 60)
    # An hour is complete once the 1m tier covers all of it (and has nothing
    # pending inside it): computing it earlier would only be redone.
    below = read_state(cur, "1m", kind)
    if below is None:
        return -1
    return min(_floor(below.start, 3600), _floor(now - GRACE_S, 3600))


@cache
def aggregate_sql(tier: str, kind: str, vendor: str) -> str:
    """INSERT … SELECT that upserts every (entity, bucket) in [%s, %s) of `tier`.

    Groups first (min/avg/max/count plus, per metric, the time of the newest row
    that carries it), then fetches each `_last` with a point lookup by the source
    table's primary key. A recomputed row replaces the old one unless it would
    count fewer samples: then the source has lost rows to retention since, and
    the stored row is the better record.
    """
    keys = ENTITY_COLUMNS[kind]
    metrics = metric_names(kind)
    source, time_col = _source(tier, kind)
    target = rollup_table(kind, tier)
    inner: list[str] = [*keys]
    if tier == "1m":
        inner += [f"{bucket_expr(vendor, 60)} AS b", "count(*) AS n"]
        for m in metrics:
            inner += [
                f"min({m}) AS {m}_min",
                f"avg({m}) AS {m}_mean",
                f"max({m}) AS {m}_max",
                f"max(CASE WHEN {m} IS NOT NULL THEN ts END) AS {m}_at",
            ]
        last_col, at_col = "{m}", "ts"
    else:
        inner += ["(bucket / 3600) * 3600 AS b", "sum(n) AS n"]
        for m in metrics:
            # mean weighted by the rows each minute counted
            inner += [
                f"min({m}_min) AS {m}_min",
                f"sum({m}_mean * n) / sum(CASE WHEN {m}_mean IS NOT NULL THEN n END) AS {m}_mean",
                f"max({m}_max) AS {m}_max",
                f"max(CASE WHEN {m}_last IS NOT NULL THEN bucket END) AS {m}_at",
            ]
        last_col, at_col = "{m}_last", "bucket"
    match = " AND ".join(f"s.{k} = g.{k}" for k in keys)
    outer: list[str] = [*(f"g.{k}" for k in keys), "g.b", "g.n"]
    for m in metrics:
        lookup = (
            f"(SELECT s.{last_col.format(m=m)} FROM {source} s"
            f" WHERE {match} AND s.{at_col} = g.{m}_at)"
        )
        outer += [f"g.{m}_min", f"g.{m}_mean", f"g.{m}_max", lookup]
    columns: list[str] = [*keys, "bucket", "n"]
    for m in metrics:
        columns += [f"{m}_min", f"{m}_mean", f"{m}_max", f"{m}_last"]
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns[len(keys) + 1 :])
    group = ", ".join((*keys, "b"))
    # "WHERE true" lets SQLite parse ON CONFLICT after INSERT … SELECT.
    return (
        f"INSERT INTO {target} ({', '.join(columns)})"
        f" SELECT {', '.join(outer)} FROM ("
        f"SELECT {', '.join(inner)} FROM {source}"
        f" WHERE {time_col} >= %s AND {time_col} < %s GROUP BY {group}) g WHERE true"
        f" ON CONFLICT ({', '.join((*keys, 'bucket'))}) DO UPDATE SET {updates}"
        f" WHERE excluded.n >= {target}.n"
    )


def _first_data(cur: CursorWrapper, tier: str, kind: str, lo: int, hi: int) -> int | None:
    table, col = _source(tier, kind)
    cur.execute(f"SELECT min({col}) FROM {table} WHERE {col} >= %s AND {col} < %s", [lo, hi])
    first = cur.fetchone()[0]
    return None if first is None else _floor(first, TIER_SECONDS[tier])


def _mark_hours_dirty(cur: CursorWrapper, kind: str, since: int) -> None:
    """Minutes from `since` were recomputed: the 1h tier must redo those hours."""
    hour = _floor(since, 3600)
    cur.execute(
        "UPDATE fw_rollup_state SET dirty_from = %s WHERE tier = '1h' AND kind = %s"
        " AND done_until > %s AND (dirty_from IS NULL OR dirty_from > %s)",
        [hour, kind, hour, hour],
    )


def _chunk(tier: str, kind: str, now: float, using: str) -> int | None:
    """Compute one chunk. Returns rows written, or None when there is nothing to do."""
    conn = connections[using]
    step = TIER_SECONDS[tier]
    for _ in range(_CLAIM_ATTEMPTS):
        with conn.cursor() as cur:
            state = read_state(cur, tier, kind) or _first_state(cur, tier, kind)
            end = _end(cur, tier, kind, now)
            if state is None or state.start >= end:
                return None
        with transaction.atomic(using=using), conn.cursor() as cur:
            if not claim(cur, tier, kind, state):
                continue  # another worker or the ingest writer moved it: re-read
            for statement in rollup_preamble(conn.vendor):
                cur.execute(statement)
            # Skip stretches with no data (an idle night) in one step. Looked up after
            # the claim: a straggler landing in the skipped stretch then either is seen
            # here or finds done_until already past it and marks the tier dirty.
            first = _first_data(cur, tier, kind, state.start, end)
            lo = end if first is None else first
            hi = min(end, lo + MAX_BUCKETS_PER_CHUNK[tier] * step)
            written = 0
            if lo < hi:
                cur.execute(aggregate_sql(tier, kind, conn.vendor), [lo, hi])
                written = max(cur.rowcount, 0)
                if tier == "1m":
                    _mark_hours_dirty(cur, kind, lo)
            done = max(state.done_until, hi)
            # Dirty range not finished within this chunk: carry on from hi next.
            dirty = hi if state.dirty_from is not None and hi < state.done_until else None
            cur.execute(
                "UPDATE fw_rollup_state SET done_until = %s, dirty_from = %s"
                " WHERE tier = %s AND kind = %s",
                [done, dirty, tier, kind],
            )
            return written
    log.info("rollup %s/%s: state kept moving under us; leaving it to the next run", tier, kind)
    return None


def rollup(tier: str, kind: str, now: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """Bring `tier` of `kind` up to date as of `now`. Returns rollup rows written."""
    if tier not in TIER_SECONDS:
        raise ValueError(f"unknown tier {tier!r}")
    total = 0
    while (written := _chunk(tier, kind, now, using)) is not None:
        total += written
    return total


def rollup_all(now: float, using: str = DEFAULT_DB_ALIAS) -> dict[str, int]:
    """Every kind, 1m before 1h (an hour is built from the minutes just computed)."""
    done: dict[str, int] = {}
    for tier in ("1m", "1h"):
        for kind in METRICS:
            done[f"{tier}/{kind}"] = rollup(tier, kind, now, using)
    return done
