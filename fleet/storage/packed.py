"""The packer: sealed spans of raw rows become one packed row per entity (issue 23).

A span [lo, hi) is sealed once it has ended and the 1-minute rollup has summarised it
(`hi` <= the 1m tier's `done_until`): nothing but late data can still land in it, and the
rollup's range reads never look there again. Each such span of each kind is packed in
two steps:

1. Read (no lock that ingest waits for): the span's raw rows, streamed entity by entity,
   and any packed rows already overlapping it (a previous pass, before late data arrived);
   merge them per entity (a packed sample wins over a raw one with the same time: a resend
   is the same sample, and the first stored is what ingest's `ON CONFLICT DO NOTHING`
   keeps) and encode each entity's span (fleet.storage.packed_codec).
2. Write, in one transaction: lock the packed table against other packers and the raw
   span against inserts (PostgreSQL: the span's partition, ACCESS EXCLUSIVE, with a short
   lock_timeout; SQLite: the write lock), check that neither changed since step 1 (else the
   span is left for the next pass), replace the packed rows, then free the raw rows:
   PostgreSQL TRUNCATEs the partition (its files are replaced by empty ones, so the disk is
   freed at commit, no VACUUM needed), SQLite DELETEs them.

The lock in step 2 is on one old partition only: ingest's inserts into any other partition
go on (INSERT and COPY into the parent lock only the partitions they route rows to), and a
late row for the locked span waits at most ingest's lock_timeout, is answered 503 and
resent. Readers never lock: they check afterwards that no pass replaced what they read
(fleet.storage.packed_read).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, groupby
from operator import itemgetter
from typing import Any

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections, transaction

from agents.protocol.metrics import METRICS
from fleet.storage import packed_codec, raw_span
from fleet.storage.dialect import POSTGRESQL
from fleet.storage.partitions import MINVALUE, list_partitions, partitioned_parents
from fleet.storage.schema import ENTITY_COLUMNS, packed_table, raw_table
from fleet.storage.single_flight import single_flight

log = logging.getLogger(__name__)

# How long a pass waits for a lock (the packed table, a raw partition) before leaving
# the span to the next pass: ingest and readers must never queue behind the packer.
LOCK_TIMEOUT_MS = 2000

# Raw rows fetched per round trip while streaming a span.
FETCH_ROWS = 20_000

# A pass starts no new span after this long, so a backlog (packing just turned on over
# hours of raw rows) does not hold the one maintenance worker away from the rollup for
# long; the next pass, a minute later, goes on. A span once started is finished.
PASS_BUDGET_S = 120.0

Entity = tuple[int, ...]
Sample = tuple[Any, ...]  # ts, then each metric of the kind


@dataclass(frozen=True, slots=True)
class Span:
    lo: int
    hi: int
    partition: str | None  # PostgreSQL: the raw partition that is exactly this span


@dataclass(frozen=True, slots=True)
class PackedRow:
    entity: Entity
    span_start: int
    span_end: int
    n: int
    data: bytes


def metric_names(kind: str) -> tuple[str, ...]:
    return tuple(m.name for m in METRICS[kind])


def sample_columns(kind: str) -> tuple[str, ...]:
    """The columns a packed span holds, in codec order: ts, then the kind's metrics."""
    return ("ts", *metric_names(kind))


def integer_flags(kind: str) -> tuple[bool, ...]:
    return (False, *(m.integer for m in METRICS[kind]))


def encode(kind: str, samples: Sequence[Sample]) -> bytes:
    return encode_columns(kind, [list(c) for c in zip(*samples, strict=True)])


def encode_columns(kind: str, columns: Sequence[Sequence[Any]]) -> bytes:
    """`columns`: ts, then each metric of the kind, equally long."""
    return packed_codec.pack(columns, integer_flags(kind))


def decode(kind: str, data: bytes) -> list[Sample]:
    """The samples of a packed span, oldest first, as raw rows' (ts, metrics…). A span
    packed before metrics were added to the kind's catalogue has fewer columns: the
    catalogue only grows at its end (as the raw tables grow by ADD COLUMN), so the missing
    ones are the newest, NULL in every sample."""
    blob = bytes(data)
    flags = integer_flags(kind)
    stored = packed_codec.column_count(blob)
    if stored > len(flags):
        raise packed_codec.CodecError(
            f"a {kind} span with {stored} columns; the kind has {len(flags)}"
        )
    columns = packed_codec.unpack(blob, flags[:stored])
    n = len(columns[0]) if columns else 0
    columns += [[None] * n for _ in range(len(flags) - stored)]
    return list(zip(*columns, strict=True))


def merge(packed: Sequence[Sample], raw: Sequence[Sample]) -> list[Sample]:
    """One entity's samples of both sources by time, a packed one winning a tie."""
    by_ts = {row[0]: row for row in raw}
    by_ts.update((row[0], row) for row in packed)
    return [by_ts[ts] for ts in sorted(by_ts)]


# -- which spans are sealed ----------------------------------------------------------------


def rolled_up_until(cur: Any, kind: str) -> int | None:
    cur.execute("SELECT done_until FROM fw_rollup_state WHERE tier = '1m' AND kind = %s", [kind])
    row = cur.fetchone()
    return None if row is None else int(row[0])


def shipped_until(cur: Any, kind: str) -> float | None:
    """With remote write on (fleet/remote_write/), how far it has shipped `kind`'s raw rows:
    it reads them from the raw table, so the packer leaves them there until shipped."""
    cur.execute("SELECT complete_until FROM fleet_remotewritecursor WHERE kind = %s", [kind])
    row = cur.fetchone()
    return None if row is None else float(row[0])


def sealed_spans(kind: str, using: str = DEFAULT_DB_ALIAS) -> list[Span]:
    """Spans of `kind` that hold raw rows and are sealed, oldest first: the 1-minute
    rollup has passed them and, with remote write on, so has its shipper."""
    conn = connections[using]
    with conn.cursor() as cur:
        sealed = rolled_up_until(cur, kind)
        if sealed is not None and settings.REMOTE_WRITE.enabled:
            shipped = shipped_until(cur, kind)
            sealed = None if shipped is None else min(sealed, int(shipped))
    if sealed is None:
        return []
    table = raw_table(kind)
    if conn.vendor == POSTGRESQL:
        with conn.cursor() as cur:
            execute = _executor(cur)
            if table in partitioned_parents(execute, [table]):
                return _sealed_partitions(execute, table, sealed)
    return _sealed_ranges(kind, sealed, using)


def _executor(cur: Any) -> Any:
    def execute(sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []

    return execute


def _sealed_partitions(execute: Any, table: str, sealed: int) -> list[Span]:
    """PostgreSQL: each raw partition ended by `sealed` that has rows is a span."""
    spans: list[Span] = []
    for part in list_partitions(execute, [table])[table]:
        if part.lo == MINVALUE or part.detach_pending or part.hi > sealed:
            continue
        if execute(f"SELECT EXISTS (SELECT 1 FROM {part.name})")[0][0]:
            spans.append(Span(int(part.lo), int(part.hi), part.name))
    return spans


def _sealed_ranges(kind: str, sealed: int, using: str) -> list[Span]:
    """SQLite (or an unpartitioned table): spans of `raw_span.span_s()` that have rows."""
    width = raw_span.span_s()
    limit = sealed // width * width
    spans: list[Span] = []
    since: int | None = None
    with connections[using].cursor() as cur:
        while True:
            where = "ts < %s" + ("" if since is None else " AND ts >= %s")
            params = [limit] if since is None else [limit, since]
            cur.execute(f"SELECT min(ts) FROM {raw_table(kind)} WHERE {where}", params)
            first = cur.fetchone()[0]
            if first is None:
                return spans
            lo = int(first // width * width)
            spans.append(Span(lo, lo + width, None))
            since = lo + width


# -- packing one span ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Packed:
    """What step 1 read and built, and what step 2 checks is still so."""

    rows: list[PackedRow]
    raw_count: int
    seen: frozenset[tuple[Entity, int, int]]  # (entity, span_start, n) of packed rows read
    replaced: list[tuple[Entity, int]]  # (entity, span_start) of those merged into `rows`


def pack_span(kind: str, span: Span, using: str = DEFAULT_DB_ALIAS) -> int:
    """Pack one sealed span; the packed rows written (0: it changed meanwhile, or a lock
    was not had in time: the next pass tries again)."""
    built = _build(kind, span, using)
    try:
        return _write(kind, span, built, using)
    except OperationalError as exc:  # lock_timeout: someone held the span
        log.info("pack %s [%s, %s): left for the next pass: %s", kind, span.lo, span.hi, exc)
        return 0


def _build(kind: str, span: Span, using: str) -> Packed:
    keys = ENTITY_COLUMNS[kind]
    width = len(keys)
    existing = _overlapping(kind, span, using)
    by_entity: dict[Entity, list[PackedRow]] = {}
    for row in existing:
        by_entity.setdefault(row.entity, []).append(row)
    out: list[PackedRow] = []
    count = 0
    present, counted = _present_metrics(kind, span, using)
    for entity, rows in _stream_raw(kind, span, present, using):
        count += len(rows)
        columns = _full_columns(kind, present, list(zip(*rows, strict=True))[width:])
        olds = by_entity.pop(entity, [])
        if olds:
            packed = [s for old in olds for s in decode(kind, old.data)]
            samples = merge(packed, list(zip(*columns, strict=True)))
            columns = [list(c) for c in zip(*samples, strict=True)]
        start = min([span.lo, *(o.span_start for o in olds)])
        end = max([span.hi, *(o.span_end for o in olds)])
        out.append(PackedRow(entity, start, end, len(columns[0]), encode_columns(kind, columns)))
    if count != counted:
        # A late row arrived between the count and the fetch: it may carry a field the
        # count found in no row (and the fetch left out). The write step refuses a count
        # of -1, and the next pass reads the span again.
        count = -1
    seen = frozenset((r.entity, r.span_start, r.n) for r in existing)
    replaced = [(r.entity, r.span_start) for r in existing if r.entity not in by_entity]
    return Packed(out, count, seen, replaced)


def _overlapping(kind: str, span: Span, using: str) -> list[PackedRow]:
    keys = ENTITY_COLUMNS[kind]
    with connections[using].cursor() as cur:
        cur.execute(
            f"SELECT {', '.join(keys)}, span_start, span_end, n, data FROM {packed_table(kind)}"
            " WHERE span_start < %s AND span_end > %s",
            [span.hi, span.lo],
        )
        rows = cur.fetchall()
    w = len(keys)
    return [
        PackedRow(tuple(r[:w]), int(r[w]), int(r[w + 1]), int(r[w + 2]), r[w + 3]) for r in rows
    ]


def _present_metrics(kind: str, span: Span, using: str) -> tuple[tuple[str, ...], int]:
    """The kind's metrics that have a value in some raw row of the span. Counted in the
    database first, so the rows are fetched without the columns that are NULL throughout
    (a field no device of the fleet reports; the peer bench's stream fills 15 of 34).
    Also the span's row count, which the fetch must match."""
    table = span.partition or raw_table(kind)
    metrics = metric_names(kind)
    counts = ", ".join(["count(*)", *(f"count({m})" for m in metrics)])
    with connections[using].cursor() as cur:
        cur.execute(f"SELECT {counts} FROM {table} WHERE ts >= %s AND ts < %s", [span.lo, span.hi])
        found = cur.fetchone()
    return tuple(m for m, n in zip(metrics, found[1:], strict=True) if n), int(found[0])


def _full_columns(
    kind: str, present: Sequence[str], fetched: Sequence[Sequence[Any]]
) -> list[Sequence[Any]]:
    """ts and every metric column of the kind, from `fetched` (ts, then the `present`
    metrics); the others NULL."""
    by_name = dict(zip(present, fetched[1:], strict=True))
    nulls = [None] * len(fetched[0])
    return [fetched[0], *(by_name.get(m, nulls) for m in metric_names(kind))]


def _stream_raw(
    kind: str, span: Span, present: Sequence[str], using: str
) -> Iterator[tuple[Entity, list[Sample]]]:
    """The span's raw rows (entity…, ts, the `present` metrics) grouped by entity, streamed."""
    keys = ENTITY_COLUMNS[kind]
    table = span.partition or raw_table(kind)
    entity_of = itemgetter(*range(len(keys)))
    rows = chain.from_iterable(_fetch(table, keys, present, span, using))  # no frame a row
    for entity, group in groupby(rows, key=entity_of):
        yield (entity if isinstance(entity, tuple) else (entity,)), list(group)


def _fetch(
    table: str, keys: Sequence[str], present: Sequence[str], span: Span, using: str
) -> Iterator[list[tuple[Any, ...]]]:
    """The span's rows in (entity…, ts) order, a page at a time. PostgreSQL: `FETCH_ROWS`
    a query, each query its own short transaction: a 10,000-GPU span is millions of rows
    and takes seconds to read, and one snapshot held that long would keep PostgreSQL from
    pruning the dead row versions of every table updated meanwhile (each GPU's latest-state
    row is rewritten every second, so that table bloated by a row version a second per
    GPU). Rows that arrive between two queries (late data) are what the write step's count
    check catches. Keyset pagination on the raw key (entity…, ts), which the partition's
    primary key index serves in order."""
    key = (*keys, "ts")
    columns = ", ".join((*key, *present))
    order = ", ".join(key)
    base = f"SELECT {columns} FROM {table} WHERE ts >= %s AND ts < %s"
    if connections[using].vendor != POSTGRESQL:
        # SQLite keys raw rows time first, so each page would sort the span again; its
        # readers hold no snapshot that keeps others' old row versions: one query.
        with connections[using].cursor() as cur:
            cur.execute(f"{base} ORDER BY {order}", [span.lo, span.hi])
            while batch := cur.fetchmany(FETCH_ROWS):
                yield batch
        return
    after: tuple[Any, ...] | None = None
    conn = connections[using]
    conn.ensure_connection()
    first = f"{base} ORDER BY {order} LIMIT {FETCH_ROWS}"
    marks = ", ".join(["%s"] * len(key))
    then = f"{base} AND ({order}) > ({marks}) ORDER BY {order} LIMIT {FETCH_ROWS}"
    # A plain psycopg cursor (Django's binds client-side, which has no binary results):
    # numbers arrive binary, without text parsing.
    raw_conn = conn.connection
    with psycopg.Cursor(raw_conn) as cur:
        while True:
            params = [span.lo, span.hi] if after is None else [span.lo, span.hi, *after]
            with raw_conn.transaction():
                cur.execute(ALONG_THE_KEY)
                cur.execute(first if after is None else then, params, binary=True)
                batch = cur.fetchall()
            yield batch
            if len(batch) < FETCH_ROWS:
                return
            after = tuple(batch[-1][: len(key)])


# Each page is read along the primary key's index, whatever the planner's statistics say
# (SET LOCAL: for that page's transaction only). A partition that has just filled has none
# yet (autovacuum analyses it later), and without them PostgreSQL read every page by
# scanning and sorting the whole span again: bench/pack_pass.py measured 12.9 µs of backend
# per GPU sample packed that way (a 2,000-GPU 5-minute span read in 30 full scans), 2.0
# along the index.
ALONG_THE_KEY = (
    "SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;"
    " SET LOCAL enable_sort = off; SET LOCAL max_parallel_workers_per_gather = 0"
)


def _write(kind: str, span: Span, built: Packed, using: str) -> int:
    conn = connections[using]
    keys = ENTITY_COLUMNS[kind]
    table = packed_table(kind)
    raw = span.partition or raw_table(kind)
    with transaction.atomic(using=using), conn.cursor() as cur:
        if conn.vendor == POSTGRESQL:
            cur.execute(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
            cur.execute(f"LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE")
            if span.partition is not None:
                cur.execute(f"LOCK TABLE {span.partition} IN ACCESS EXCLUSIVE MODE")
        if not _unchanged(cur, kind, span, built, raw):
            log.info("pack %s [%s, %s): changed while packing; next pass", kind, span.lo, span.hi)
            return 0
        match = " AND ".join(f"{k} = %s" for k in keys)
        cur.executemany(
            f"DELETE FROM {table} WHERE {match} AND span_start = %s",
            [[*entity, start] for entity, start in built.replaced],
        )
        columns = (*keys, "span_start", "span_end", "n", "data")
        marks = ", ".join(["%s"] * len(columns))
        cur.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})",
            [[*r.entity, r.span_start, r.span_end, r.n, r.data] for r in built.rows],
        )
        _free_raw(cur, span, raw)
    return len(built.rows)


def _free_raw(cur: Any, span: Span, raw: str) -> None:
    """Remove the span's raw rows, in the packing transaction. PostgreSQL: TRUNCATE gives
    the partition new, empty files and unlinks the old ones at commit."""
    if span.partition is not None:
        cur.execute(f"TRUNCATE {span.partition}")
    else:
        cur.execute(f"DELETE FROM {raw} WHERE ts >= %s AND ts < %s", [span.lo, span.hi])


def _unchanged(cur: Any, kind: str, span: Span, built: Packed, raw: str) -> bool:
    """Still the raw rows and packed rows step 1 read? Rows are only ever added to a
    sealed raw span (late data; a resend of a stored sample is refused by the key), so
    the same count is the same rows."""
    cur.execute(f"SELECT count(*) FROM {raw} WHERE ts >= %s AND ts < %s", [span.lo, span.hi])
    if int(cur.fetchone()[0]) != built.raw_count:
        return False
    keys = ENTITY_COLUMNS[kind]
    cur.execute(
        f"SELECT {', '.join(keys)}, span_start, n FROM {packed_table(kind)}"
        " WHERE span_start < %s AND span_end > %s",
        [span.hi, span.lo],
    )
    w = len(keys)
    return {(tuple(r[:w]), int(r[w]), int(r[w + 1])) for r in cur.fetchall()} == built.seen


def pack_sealed(using: str = DEFAULT_DB_ALIAS) -> dict[str, int]:
    """Pack every sealed span of every kind (nothing when packing is off); packed rows
    written per kind."""
    if not raw_span.packing_enabled():
        return {}
    written: dict[str, int] = {kind: 0 for kind in METRICS}
    with _single_flight(using) as alone:
        if not alone:
            return written
        deadline = time.monotonic() + PASS_BUDGET_S
        for kind in METRICS:
            for span in sealed_spans(kind, using):
                if time.monotonic() >= deadline:
                    return written
                written[kind] += pack_span(kind, span, using)
    return written


# PostgreSQL advisory lock key of the packer ("flpk"): one pass at a time, whichever worker.
_LOCK_KEY = 0x666C706B


def _single_flight(using: str) -> contextlib.AbstractContextManager[bool]:
    """One pass at a time (fleet.storage.single_flight): two would build the same spans,
    and all but one would find them changed and drop the work."""
    return single_flight(_LOCK_KEY, using)


def unpack_to_raw(cur: Any, kind: str) -> int:
    """Every packed span's samples back into the raw table (a sample already there is
    kept): what undoing migration 0031 does before it drops the packed tables. Samples
    restored (PostgreSQL: the spans' raw partitions must still exist; retention drops a
    partition and its packed spans at the same horizon)."""
    keys = ENTITY_COLUMNS[kind]
    w = len(keys)
    columns = (*keys, *sample_columns(kind))
    marks = ", ".join(["%s"] * len(columns))
    insert = (
        f"INSERT INTO {raw_table(kind)} ({', '.join(columns)}) VALUES ({marks})"
        " ON CONFLICT DO NOTHING"
    )
    cur.execute(f"SELECT {', '.join(keys)}, data FROM {packed_table(kind)}")
    restored = 0
    for row in cur.fetchall():
        samples = [(*row[:w], *s) for s in decode(kind, row[w])]
        cur.executemany(insert, samples)
        restored += len(samples)
    return restored
