"""1-minute and 1-hour rollups of the raw time-series tables.

`rollup(tier, kind, now)` computes every complete bucket from the tier's
`done_until` up to the last bucket that ended at least `GRACE_S` before `now`,
and recomputes the (entity, bucket) pairs that late data marked
(`fleet.storage.late`). 1m reads the raw table, 1h reads the 1m table. All of it
is set-based SQL through Django's connection, one code path for SQLite and
PostgreSQL; only a few fragments differ (`fleet.storage.dialect`).

Ingest never waits on a rollup. The ingest commit only INSERTs (raw rows, marks)
and reads the 1m tier's seal, `sealed_until`, with a plain SELECT: a row it stores
for a minute before the seal gets a mark. Before a 1m chunk computes [lo, hi) it
moves the seal to `hi` in its own short transaction and, on PostgreSQL, waits until
every transaction that was writing at that moment has ended (a commit that read the
old seal had already written its raw rows, so it is in that set); after that every
row of [lo, hi) is either visible to the aggregate or marked.

Safe to run from two workers at once: each chunk claims the state row with a
conditional UPDATE (`WHERE done_until = <what I read>`) and gives up the chunk when
the rowcount says another worker moved it. The claim row-locks the state on
PostgreSQL (ingest only reads it, so it never queues behind that lock); on SQLite
the chunk's BEGIN IMMEDIATE holds the write lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.db.backends.utils import CursorWrapper

from agents.protocol.metrics import METRICS
from fleet.storage import health_hours, late, packed_read, partitions
from fleet.storage.dialect import (
    POSTGRESQL,
    WriterTurns,
    bucket_expr,
    rollup_preamble,
    share_lock,
)
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

# Late-data marks one chunk takes: a node back after an hour away leaves 60 per GPU.
MARKS_PER_CHUNK = 5000

# How often a chunk is re-read and re-claimed after losing a race before the
# run leaves the rest to the next beat tick.
_CLAIM_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class State:
    done_until: int
    sealed_until: int | None = None

    @property
    def start(self) -> int:
        """Everything before it is computed (late data aside: see `fleet.storage.late`)."""
        return self.done_until


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
        "SELECT done_until, sealed_until FROM fw_rollup_state WHERE tier = %s AND kind = %s",
        [tier, kind],
    )
    row = cur.fetchone()
    if row is None:
        return None
    return State(int(row[0]), None if row[1] is None else int(row[1]))


def claim(cur: CursorWrapper, tier: str, kind: str, seen: State) -> bool:
    """Take the state row for this chunk, only if nobody moved it since `seen` was read.

    A no-op UPDATE whose rowcount is the answer (healthchecks' `sendalerts` style).
    """
    cur.execute(
        "UPDATE fw_rollup_state SET done_until = done_until WHERE tier = %s AND kind = %s"
        " AND done_until = %s",
        [tier, kind, seen.done_until],
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
        "INSERT INTO fw_rollup_state (tier, kind, done_until, sealed_until)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT (tier, kind) DO NOTHING",
        [tier, kind, start, start],
    )
    if tier == "1m":
        _include_unsealed_stragglers(cur, kind, start)
    return read_state(cur, tier, kind)


def _include_unsealed_stragglers(cur: CursorWrapper, kind: str, start: int) -> None:
    """A commit that found no state row left no marks; if it stored rows older than
    `start` it was in flight when the row appeared: wait it out, then start earlier."""
    if cur.db.vendor == POSTGRESQL and not late.wait_for_writers(cur):
        return  # left to whoever reads the state next; marks cover the rest
    table, col = _source("1m", kind)
    cur.execute(f"SELECT min({col}) FROM {table} WHERE {col} < %s", [start])
    older = cur.fetchone()[0]
    if older is not None:
        first = _floor(older, 60)
        cur.execute(
            "UPDATE fw_rollup_state SET done_until = %s, sealed_until = %s"
            " WHERE tier = '1m' AND kind = %s AND done_until = %s",
            [first, max(first, start), kind, start],
        )


def _end(cur: CursorWrapper, tier: str, kind: str, now: float) -> int:
    """Exclusive end of the complete buckets this tier may compute now."""
    if tier == "1m":
        return _floor(now - GRACE_S, 60)
    # An hour is complete once the 1m tier covers all of it: computing it earlier
    # would only be redone.
    below = read_state(cur, "1m", kind)
    if below is None:
        return -1
    return min(_floor(below.done_until, 3600), _floor(now - GRACE_S, 3600))


def _read_source(tier: str, kind: str, packed: bool) -> str:
    """What the tier's rows are read from: with `packed` (1m recomputing minutes inside
    packed spans) the raw table and the staged packed samples as one
    (`packed_read.source`)."""
    return packed_read.source(kind) if packed else _source(tier, kind)[0]


@cache
def aggregate_sql(
    tier: str, kind: str, vendor: str, picked: bool = False, packed: bool = False
) -> str:
    """INSERT … SELECT that upserts every (entity, bucket) of `tier` in [%s, %s), or,
    with `picked`, every (entity, bucket) in the temp table `late.pick_table(kind)`
    (with `packed`, read from the raw table and the staged packed samples as one).

    Groups by entity and bucket: min/avg/max/count and the time of each metric's
    `_last` (`_last_columns`). A recomputed row replaces the old one unless it would count
    fewer samples: then the source has lost rows to retention since, and the stored
    row is the better record.
    """
    keys = ENTITY_COLUMNS[kind]
    metrics = metric_names(kind)
    source, time_col = _source(tier, kind)
    target = rollup_table(kind, tier)
    inner: list[str] = [*keys]
    if tier == "1m":
        inner += [f"{bucket_expr(vendor, 60)} AS b", "count(*) AS n"]
        for m in metrics:
            inner += [f"min({m}) AS {m}_min", f"avg({m}) AS {m}_mean", f"max({m}) AS {m}_max"]
    else:
        inner += ["(bucket / 3600) * 3600 AS b", "sum(n) AS n"]
        for m in metrics:
            # mean weighted by the rows each minute counted
            inner += [
                f"min({m}_min) AS {m}_min",
                f"sum({m}_mean * n) / sum(CASE WHEN {m}_mean IS NOT NULL THEN n END) AS {m}_mean",
                f"max({m}_max) AS {m}_max",
            ]
    last_inner, last_outer = _last_columns(tier, kind, packed)
    inner += last_inner
    outer: list[str] = [*(f"g.{k}" for k in keys), "g.b", "g.n"]
    for m, last in zip(metrics, last_outer, strict=True):
        outer += [f"g.{m}_min", f"g.{m}_mean", f"g.{m}_max", last]
    columns: list[str] = [*keys, "bucket", "n"]
    for m in metrics:
        columns += [f"{m}_min", f"{m}_mean", f"{m}_max", f"{m}_last"]
    updates = ", ".join(f"{c} = excluded.{c}" for c in columns[len(keys) + 1 :])
    group = ", ".join((*keys, "b"))
    if picked:
        rows = f"{_picked_rows(tier, kind, vendor, packed)} src"
    else:
        rows = f"{source} WHERE {time_col} >= %s AND {time_col} < %s"
    # "WHERE true" lets SQLite parse ON CONFLICT after INSERT … SELECT.
    return (
        f"INSERT INTO {target} ({', '.join(columns)})"
        f" SELECT {', '.join(outer)} FROM ("
        f"SELECT {', '.join(inner)} FROM {rows} GROUP BY {group}) g"
        f"{_newest_row_join(tier, kind, packed)} WHERE true"
        f" ON CONFLICT ({', '.join((*keys, 'bucket'))}) DO UPDATE SET {updates}"
        f" WHERE excluded.n >= {target}.n"
    )


def _last_columns(tier: str, kind: str, packed: bool = False) -> tuple[list[str], list[str]]:
    """Each metric's `_last`, the value of the newest source row that carries it.

    The grouping finds the group's newest row (`at_max`) and, per metric, the time of the
    newest row carrying it (`<m>_at`). The newest row is joined once per group (`nr`, by
    the source's primary key), and gives every metric it carries: all of them in the
    common case. Only a metric the newest row lacks (a slow-lane field, sent one sample in
    thirty) is fetched by a point lookup at its own time; `CASE` evaluates that lookup
    only when it is needed, on both engines.

    Measured on PostgreSQL 15 here (512 GPUs, 34 metrics, 5 of them in one sample in
    thirty; median of 5): one minute 0.198 s with a lookup per metric, 0.172 s this way;
    five minutes 0.895 s and 0.694 s; identical rows. The ordered aggregates were slower
    still: `(max(ARRAY[ts, m]) FILTER (WHERE m IS NOT NULL))[2]` 0.24 s and
    `(array_agg(m ORDER BY ts DESC) FILTER (…))[1]` 0.36 s for one minute (1.23 s and
    1.78 s for five): they build an array per row and metric, where the join is per group.
    """
    keys = ENTITY_COLUMNS[kind]
    at_col = _source(tier, kind)[1]
    source = _read_source(tier, kind, packed)
    match = " AND ".join(f"s.{k} = g.{k}" for k in keys)
    inner: list[str] = [f"max({at_col}) AS at_max"]
    outer: list[str] = []
    for m in metric_names(kind):
        value = m if tier == "1m" else f"{m}_last"
        inner.append(f"max(CASE WHEN {value} IS NOT NULL THEN {at_col} END) AS {m}_at")
        outer.append(
            f"CASE WHEN g.{m}_at = g.at_max THEN nr.{value} WHEN g.{m}_at IS NOT NULL THEN"
            f" (SELECT s.{value} FROM {source} s WHERE {match} AND s.{at_col} = g.{m}_at) END"
        )
    return inner, outer


def _newest_row_join(tier: str, kind: str, packed: bool = False) -> str:
    """Each group's newest source row, joined by the source's primary key."""
    at_col = _source(tier, kind)[1]
    source = _read_source(tier, kind, packed)
    same = " AND ".join(f"nr.{k} = g.{k}" for k in ENTITY_COLUMNS[kind])
    return f" JOIN {source} nr ON {same} AND nr.{at_col} = g.at_max"


def _picked_rows(tier: str, kind: str, vendor: str, packed: bool = False) -> str:
    """The source rows of the (entity, bucket) pairs in the pick table, as a subquery.

    CROSS JOIN makes SQLite keep the left side outer (PostgreSQL plans it freely). The
    source is probed once per pick by its key: entity first everywhere except SQLite's
    raw table, keyed time first, which is scanned once per distinct minute instead.
    """
    keys = ENTITY_COLUMNS[kind]
    col = _source(tier, kind)[1]
    source = _read_source(tier, kind, packed)
    pick = late.pick_table(kind)
    step = TIER_SECONDS[tier]
    same = " AND ".join(f"p.{k} = s.{k}" for k in keys)
    if tier == "1m" and vendor != POSTGRESQL:
        return (
            f"(SELECT s.* FROM (SELECT DISTINCT bucket FROM {pick}) m CROSS JOIN {source} s"
            f" WHERE s.{col} >= m.bucket AND s.{col} < m.bucket + {step} AND EXISTS"
            f" (SELECT 1 FROM {pick} p WHERE {same} AND p.bucket = m.bucket))"
        )
    return (
        f"(SELECT s.* FROM {pick} p CROSS JOIN {source} s"
        f" WHERE {same} AND s.{col} >= p.bucket AND s.{col} < p.bucket + {step})"
    )


def _first_data(cur: CursorWrapper, tier: str, kind: str, lo: int, hi: int) -> int | None:
    table, col = _source(tier, kind)
    cur.execute(f"SELECT min({col}) FROM {table} WHERE {col} >= %s AND {col} < %s", [lo, hi])
    first = cur.fetchone()[0]
    return None if first is None else _floor(first, TIER_SECONDS[tier])


def _target(cur: CursorWrapper, tier: str, kind: str, state: State, end: int) -> int:
    """Where this chunk will end: `MAX_BUCKETS_PER_CHUNK` buckets from the first data,
    or `end` when there is none before it (an idle stretch is skipped in one step)."""
    first = _first_data(cur, tier, kind, state.done_until, end)
    if first is None:
        return end
    return min(end, first + MAX_BUCKETS_PER_CHUNK[tier] * TIER_SECONDS[tier])


def _summarize_new_pages(cur: CursorWrapper, kind: str, start: int, end: int) -> None:
    """Bring the raw partitions' BRIN summaries up to date before the range reads (see
    `partitions.summarize_new_pages`). Only a speed-up: a failure is logged, not raised."""

    def execute(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur.execute(sql, params)
        return list(cur.fetchall())

    try:
        partitions.summarize_new_pages(execute, kind, start, end)
    except DatabaseError as exc:
        log.warning("rollup %s: BRIN summary of the raw partitions failed: %s", kind, exc)


def _seal(cur: CursorWrapper, kind: str, state: State, target: int) -> bool:
    """Move the 1m seal to `target` (its own short transaction: cur is in autocommit),
    then on PostgreSQL wait out commits that may have read the old one. From here on a
    commit storing a row before `target` leaves a mark. False: give up this chunk."""
    if state.sealed_until is None or state.sealed_until < target:
        cur.execute(
            "UPDATE fw_rollup_state SET sealed_until = %s WHERE tier = '1m' AND kind = %s"
            " AND (sealed_until IS NULL OR sealed_until < %s)",
            [target, kind, target],
        )
    # Always wait, even when the seal was already there: the run that moved it may
    # have given up waiting.
    return cur.db.vendor != POSTGRESQL or late.wait_for_writers(cur)


@dataclass(frozen=True, slots=True)
class Chunk:
    written: int  # rollup rows written
    more: bool  # worth another chunk right away


def _chunk(tier: str, kind: str, now: float, using: str) -> Chunk | None:
    """Compute one chunk. None when there is nothing to do."""
    conn = connections[using]
    for _ in range(_CLAIM_ATTEMPTS):
        with conn.cursor() as cur:
            state = read_state(cur, tier, kind) or _first_state(cur, tier, kind)
            if state is None:
                return None
            end = _end(cur, tier, kind, now)
            if tier == "1m" and conn.vendor == POSTGRESQL and state.done_until < end:
                _summarize_new_pages(cur, kind, state.done_until, end)
            target = _target(cur, tier, kind, state, end) if state.done_until < end else None
            if target is not None and tier == "1m" and not _seal(cur, kind, state, target):
                target = None  # the range waits for the next run; marks need no seal
        with transaction.atomic(using=using), conn.cursor() as cur:
            if not claim(cur, tier, kind, state):
                continue  # another worker moved it: re-read
            for statement in rollup_preamble(conn.vendor):
                cur.execute(statement)
            written, done = 0, state.done_until
            if target is not None:
                written, done = _compute_range(cur, tier, kind, state, target)
            picked, rewritten = _recompute_marked(cur, tier, kind, done)
            if done == state.done_until and not picked:
                return None
            cur.execute(
                "UPDATE fw_rollup_state SET done_until = %s WHERE tier = %s AND kind = %s",
                [done, tier, kind],
            )
            more = done > state.done_until or picked >= MARKS_PER_CHUNK
            return Chunk(written + rewritten, more)
    log.info("rollup %s/%s: state kept moving under us; leaving it to the next run", tier, kind)
    return None


def _compute_range(
    cur: CursorWrapper, tier: str, kind: str, state: State, target: int
) -> tuple[int, int]:
    """Aggregate the next buckets before `target`; (rows written, new done_until)."""
    step = TIER_SECONDS[tier]
    # Looked up again now: rows stored in a stretch `_target` saw empty, by commits that
    # read the old seal, are visible by now (their commits were waited out).
    first = _first_data(cur, tier, kind, state.done_until, target)
    if first is None:
        return 0, target
    hi = min(target, first + MAX_BUCKETS_PER_CHUNK[tier] * step)
    cur.execute(aggregate_sql(tier, kind, cur.db.vendor), [first, hi])
    written = max(cur.rowcount, 0)
    if tier == "1h" and kind == "gpu":
        health_hours.write_hours(cur, first, hi)
    if tier == "1m":
        hours_done = _hours_done(cur, kind)
        if hours_done is not None and first < hours_done:
            # Only after a rewind (migration 0015 folding a dirty range): minutes of
            # hours the 1h tier already passed.
            late.mark_hours_of_range(
                cur, kind, rollup_table(kind, "1m"), first, min(hi, hours_done)
            )
    return written, hi


def _recompute_marked(cur: CursorWrapper, tier: str, kind: str, done: int) -> tuple[int, int]:
    """Take up to `MARKS_PER_CHUNK` of the tier's marks and recompute exactly those
    (entity, bucket) pairs; (marks taken, rows written). `done`: how far the tier has
    got, this chunk included."""
    marks = late.take_marks(cur, kind, tier, MARKS_PER_CHUNK)
    if not marks:
        return 0, 0
    vendor = cur.db.vendor
    late.stage_marks(cur, kind, marks, vendor)
    written = _aggregate_picked(cur, tier, kind, vendor)
    if tier == "1m":
        hours_done = _hours_done(cur, kind)
        if hours_done is not None:
            late.mark_hours_from_picked(cur, kind, hours_done)
    else:
        late.mark_ledger_hours_from_picked(cur, kind)
        if kind == "gpu":
            health_hours.rewrite_hours(cur, before=done)
    return len(marks), written


def _aggregate_picked(cur: CursorWrapper, tier: str, kind: str, vendor: str) -> int:
    """Recompute the picked (entity, bucket) pairs; rows written. A 1m minute inside a
    packed span reads its packed samples too (staged first), and is computed again if a
    packer pass moved rows under the read (`packed_read`)."""
    if tier != "1m":
        cur.execute(aggregate_sql(tier, kind, vendor, picked=True))
        return max(int(cur.rowcount), 0)
    written = 0
    for _ in range(packed_read.READ_ATTEMPTS):
        staged = packed_read.stage_picked(cur, kind, TIER_SECONDS[tier])
        cur.execute(aggregate_sql(tier, kind, vendor, picked=True, packed=staged.any))
        written = max(int(cur.rowcount), 0)
        if packed_read.picked_version(cur, kind) == staged.version:
            break
    return written


def _hours_done(cur: CursorWrapper, kind: str) -> int | None:
    """The 1h tier's done_until, read FOR SHARE on PostgreSQL: a 1h chunk claiming
    concurrently either committed first (and this sees how far it got) or waits for
    this transaction (and its aggregate then sees the minutes just written)."""
    lock = share_lock(cur.db.vendor)
    cur.execute(
        f"SELECT done_until FROM fw_rollup_state WHERE tier = '1h' AND kind = %s{lock}", [kind]
    )
    row = cur.fetchone()
    return None if row is None else int(row[0])


def rollup(tier: str, kind: str, now: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """Bring `tier` of `kind` up to date as of `now`. Returns rollup rows written."""
    if tier not in TIER_SECONDS:
        raise ValueError(f"unknown tier {tier!r}")
    total = 0
    turns = WriterTurns(connections[using].vendor)  # SQLite: let waiting writers in
    started = time.monotonic()
    while (chunk := _chunk(tier, kind, now, using)) is not None:
        total += chunk.written
        if not chunk.more:
            break
        turns.took(time.monotonic() - started)
        started = time.monotonic()
    return total


def rollup_all(now: float, using: str = DEFAULT_DB_ALIAS) -> dict[str, int]:
    """Every kind, 1m before 1h (an hour is built from the minutes just computed)."""
    done: dict[str, int] = {}
    for tier in ("1m", "1h"):
        for kind in METRICS:
            done[f"{tier}/{kind}"] = rollup(tier, kind, now, using)
    return done
