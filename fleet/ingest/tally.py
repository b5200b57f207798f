"""Refusals counted per source, for the admin's "Refused input" list.

The log says what each refusal was (rate-limited); this says how much each source had
refused, kept past the log's rotation. Every refusal of a server process is counted in
memory under (source, transport, status, field) — no database work on the refusing
path, so a flood of bad input costs a dict update — and a daemon thread adds the counts
to `fleet_rejectiontally` every `FLUSH_EVERY_S` (started by the ASGI application).
Counts a process had not flushed when it was killed are lost (the log still has them).

Bounded, because a refused request may claim any source it likes (no token needed):
- in memory, at most `MAX_KEYS` keys wait between flushes; past that, refusals count
  under the source "(too many sources)", one key per transport and status;
- in the table, each flush keeps at most `MAX_ROWS` rows: the rows seen longest ago are
  deleted, and their refusals are added to one row, source "(older rows dropped)", so
  the counts still add up to every refusal counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.storage.db import Database, Row, Tx
from fleet.storage.dialect import is_database_error

log = logging.getLogger("fleet.ingest.tally")

Key = tuple[str, str, int, str]  # source, transport, status, field

FLUSH_EVERY_S = 5.0
MAX_KEYS = 1_000  # per server process, between flushes
MAX_ROWS = 2_000  # kept in the table after each flush, besides the dropped row
OVERFLOW_SOURCE = "(too many sources)"
# The one row that counts the refusals of rows deleted to keep the table within MAX_ROWS
# (no refusal comes by this transport, so no claimed source can take the row's key).
DROPPED_KEY: Key = ("(older rows dropped)", "tally", 0, "")

# Parts of a batch an ingest writer acknowledged but did not store, counted by the writer
# itself in the commit that leaves them out (`writer_statement`), per source and field:
# samples older than raw retention (fleet.storage.samples.drop_too_old), e.g. a node
# whose clock is far behind; samples and events of GPUs the node's inventory lacks
# (fleet/ingest/resolve.py).
WRITER_TRANSPORT = "ingest writer"
ACKED_STATUS = 200  # the batch was acknowledged; the rest of it is stored
TOO_OLD_FIELD = "ts"
UNKNOWN_GPU_FIELD = "gpu"


@dataclass
class Count:
    count: int
    first_at: float
    last_at: float
    last_reason: str
    last_client: str


class Tally:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[Key, Count] = {}
        self._flusher: threading.Thread | None = None

    def add(
        self, source: str, transport: str, status: int, field: str, reason: str, client: str
    ) -> None:
        now = time.time()
        key: Key = (source[:240], transport[:20], status, field[:100])
        with self._lock:
            key = self._room_for(key)
            seen = self._counts.get(key)
            if seen is None:
                self._counts[key] = Count(1, now, now, reason[:300], client[:240])
            else:
                seen.count += 1
                seen.last_at, seen.last_reason, seen.last_client = now, reason[:300], client[:240]

    def start_flushing(self) -> None:
        """Called once by a server process (fleetwatch/asgi.py); elsewhere (tests, tools)
        counts stay in memory until `flush()` is called."""
        with self._lock:
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_forever, name="rejection-tally", daemon=True
                )
                self._flusher.start()

    def take(self) -> dict[Key, Count]:
        with self._lock:
            counts, self._counts = self._counts, {}
        return counts

    def flush(self, db: Database | None = None) -> int:
        """Add what was counted since the last flush to the table (Django's database, or
        `db`), then drop the oldest rows past `MAX_ROWS`; kept for the next flush if the
        database refuses. Returns the keys written."""
        counts = self.take()
        if not counts:
            return 0
        try:
            if db is None:
                _in_django(lambda tx, vendor: _write(tx, vendor, counts, time.time()))
            else:
                db.transaction(lambda tx: _write(tx, db.vendor, counts, time.time()))
        except Exception as exc:
            if not _is_database_error(exc):
                raise
            log.warning("could not save refusal counts (kept for the next try): %s", exc)
            self._merge_back(counts)
            return 0
        return len(counts)

    def __len__(self) -> int:
        """Keys waiting for the next flush."""
        with self._lock:
            return len(self._counts)

    def _room_for(self, key: Key) -> Key:
        """`key`, or its overflow key once MAX_KEYS keys wait (call holding the lock): one
        per transport and status, whatever the source and field claimed."""
        if key not in self._counts and len(self._counts) >= MAX_KEYS:
            return (OVERFLOW_SOURCE, key[1], key[2], "")
        return key

    def _merge_back(self, counts: dict[Key, Count]) -> None:
        with self._lock:
            for key, old in counts.items():
                kept = self._room_for(key)
                new = self._counts.get(kept)
                if new is None:
                    self._counts[kept] = old
                else:
                    new.count += old.count
                    new.first_at = min(new.first_at, old.first_at)

    def _flush_forever(self) -> None:
        from django.db import connection

        while True:
            time.sleep(FLUSH_EVERY_S)
            try:
                self.flush()
            except Exception:  # never let the counting thread die
                log.exception("refusal counts: flush failed")
            finally:
                connection.close()  # this thread's own connection; reopened next time


_UPSERT = (
    "INSERT INTO fleet_rejectiontally (source, transport, status, field, count, last_reason,"
    " last_client, first_at, last_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (source, transport, status, field) DO UPDATE SET"
    " count = fleet_rejectiontally.count + excluded.count,"
    " last_reason = excluded.last_reason, last_client = excluded.last_client,"
    " last_at = excluded.last_at"
)
_NOT_DROPPED_ROW = "NOT (source = %s AND transport = %s)"
_COUNT_ROWS = f"SELECT count(*) FROM fleet_rejectiontally WHERE {_NOT_DROPPED_ROW}"
# RETURNING: when two server processes prune at once, each counts only the rows it
# deleted itself, so no refusal is counted twice.
_DELETE_OLDEST = (
    "DELETE FROM fleet_rejectiontally WHERE id IN (SELECT id FROM fleet_rejectiontally"
    f" WHERE {_NOT_DROPPED_ROW} ORDER BY last_at, id LIMIT %s) RETURNING count"
)


def _write(tx: Tx, vendor: str, counts: dict[Key, Count], now: float) -> None:
    from fleet.ingest.resolve import discovered_at_param as moment

    rows = [
        (
            *key,
            c.count,
            c.last_reason,
            c.last_client,
            moment(vendor, c.first_at),
            moment(vendor, c.last_at),
        )
        for key, c in counts.items()
    ]
    tx.execute_many(_UPSERT, rows)
    _drop_oldest(tx, moment(vendor, now))


def _drop_oldest(tx: Tx, now: object) -> None:
    """Keep at most MAX_ROWS rows besides the dropped row, whose count takes theirs."""
    marks = DROPPED_KEY[:2]
    [(rows,)] = tx.execute(_COUNT_ROWS, marks)
    if rows <= MAX_ROWS:
        return
    dropped = tx.execute(_DELETE_OLDEST, (*marks, rows - MAX_ROWS))
    refusals = sum(count for (count,) in dropped)
    reason = (
        f"refusals of rows deleted, those seen longest ago first, to keep this list at"
        f" {MAX_ROWS:,} rows (last time {len(dropped):,} rows)"
    )
    tx.execute(_UPSERT, (*DROPPED_KEY, refusals, reason, "", now, now))


def writer_statement(
    source: str, field: str, reason: str, now: float, vendor: str
) -> tuple[str, tuple[object, ...]]:
    """The upsert counting one batch of `source` that was acknowledged with part of it
    (`field`) not stored, for a writer's own transaction (`%s` placeholders; the time in
    the form Django reads back on `vendor`)."""
    from fleet.ingest.resolve import discovered_at_param

    moment = discovered_at_param(vendor, now)
    key = (source[:240], WRITER_TRANSPORT, ACKED_STATUS, field)
    return _UPSERT, (*key, 1, reason[:300], "", moment, moment)


def too_old_statement(
    source: str, samples: int, keep_s: float, now: float, vendor: str
) -> tuple[str, tuple[object, ...]]:
    """`writer_statement` for a batch with `samples` samples older than raw retention."""
    reason = (
        f"{samples} samples older than raw retention ({keep_s / 3600:g} h) were acknowledged"
        " and not stored: is the node's clock behind?"
    )
    return writer_statement(source, TOO_OLD_FIELD, reason, now, vendor)


class _DjangoTx:
    """`Tx.execute`/`execute_many` over Django's connection (`%s` on every engine)."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description else []

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.executemany(sql, rows)


def _is_database_error(exc: BaseException) -> bool:
    from django.db import DatabaseError

    return isinstance(exc, DatabaseError) or is_database_error(exc)


def _in_django(work: Callable[[Any, str], None]) -> None:
    from django.db import connection, transaction

    with transaction.atomic():
        work(_DjangoTx(), connection.vendor)


tally = Tally()
