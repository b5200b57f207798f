"""Every SQL difference between SQLite and PostgreSQL, in one place.

The rest of `fleet/storage/` writes one statement for both engines (`%s`
placeholders, `INSERT … ON CONFLICT`, `CASE`) and asks this module for the few
fragments that differ, and for what a database error *means*: a batch the
database refuses for good, or a transient failure worth retrying.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any, Literal

Vendor = Literal["sqlite", "postgresql"]
FailureKind = Literal["refused", "retry"]

POSTGRESQL: Vendor = "postgresql"
SQLITE: Vendor = "sqlite"


def placeholders(sql: str, vendor: str) -> str:
    """Statements are written with `%s`; sqlite3 wants `?`."""
    return sql if vendor == POSTGRESQL else sql.replace("%s", "?")


def json_param(vendor: str) -> str:
    """A JSON document bound as text: PostgreSQL's `jsonb` columns need the cast."""
    return "CAST(%s AS jsonb)" if vendor == POSTGRESQL else "%s"


def rows_source(
    vendor: str, types: Sequence[str], rows: Sequence[Sequence[Any]]
) -> tuple[str, tuple[Any, ...]]:
    """Rows bound as parameters, written where a SELECT goes (`INSERT … {source}`,
    `IN ({source})`), and their parameters. PostgreSQL unnests one typed array per column
    (`types`, its type names): one parameter per column however many rows, bound and planned
    in a fraction of a multi-row VALUES' time (measured: an upsert of 160 rows 37 % faster).
    SQLite takes a multi-row VALUES; the caller keeps rows × columns within its limit."""
    if vendor == POSTGRESQL:
        arrays = ", ".join(f"%s::{name}[]" for name in types)
        columns = tuple(list(column) for column in zip(*rows, strict=True))
        return f"SELECT * FROM unnest({arrays})", columns
    one = "(" + ", ".join(["%s"] * len(types)) + ")"
    return "VALUES " + ", ".join([one] * len(rows)), tuple(v for row in rows for v in row)


def number_type(integer: bool, vendor: str) -> str:
    """A metric column's type: 64-bit integers for bitmasks and counts, else doubles."""
    if vendor == POSTGRESQL:
        return "BIGINT" if integer else "DOUBLE PRECISION"
    return "INTEGER" if integer else "REAL"


def ts_type(vendor: str) -> str:
    return "DOUBLE PRECISION" if vendor == POSTGRESQL else "REAL"


def rollup_preamble(vendor: str) -> list[str]:
    """Statements to run first in a rollup transaction."""
    if vendor == POSTGRESQL:
        # The statement's cost estimate triggers JIT, which compiled its 136 aggregates
        # for 2.3 s to run a 0.1 s query (measured, one 512-GPU minute).
        # work_mem: with the server's default 4 MB, a 10,000-GPU minute (600,000 rows)
        # was sorted through 123 MB of temp files on every tick (2.1 s); 64 MB (hash
        # tables may use twice that, `hash_mem_multiplier`) lets it hash-aggregate in
        # memory: 1.65 s, and no temp-file writes beside the ingest path's WAL fsyncs.
        # A larger chunk (catching up) spills to disk as before.
        return ["SET LOCAL jit = off", "SET LOCAL work_mem = '64MB'"]
    return []


def bucket_expr(vendor: str, step: int) -> str:
    """The start of the `step`-second bucket a row's `ts` falls in, as an integer."""
    if vendor == POSTGRESQL:
        return f"(floor(ts / {step}) * {step})::bigint"
    return f"CAST(ts / {step} AS INTEGER) * {step}"


# SQLite's busy handler polls (1, 2, 5 … 100 ms apart) instead of queueing waiters: a
# maintenance loop that takes the write lock again at once after each slice or chunk keeps
# the ingest writer or an alert evaluation out for the whole loop. Pausing longer than the
# longest poll, once the loop has held the lock for SQLITE_MAX_HOLD_S, lets each waiter in
# and costs a long loop at most a quarter of its time.
SQLITE_WRITER_PAUSE_S = 0.11
SQLITE_MAX_HOLD_S = 0.4


class WriterTurns:
    """For a maintenance loop of short write transactions: call `took(seconds)` after each;
    on SQLite it pauses once the loop has held the write lock long enough. No-op on
    PostgreSQL, which queues lock waiters and locks rows, not the database."""

    def __init__(self, vendor: str) -> None:
        self.active = vendor != POSTGRESQL
        self.held = 0.0

    def took(self, seconds: float) -> None:
        if not self.active:
            return
        self.held += seconds
        if self.held >= SQLITE_MAX_HOLD_S:
            time.sleep(SQLITE_WRITER_PAUSE_S)
            self.held = 0.0


def share_lock(vendor: str) -> str:
    """Row lock for a read that must wait for a concurrent writer (SQLite locks the file)."""
    return " FOR SHARE" if vendor == POSTGRESQL else ""


# Python-side conversions of a value the database cannot hold (a 2**63 integer, a
# string where a number goes): the input is at fault, exactly like an IntegrityError.
_REFUSED_PY = (OverflowError, ValueError, TypeError, RecursionError)


def failure_kind(exc: BaseException) -> FailureKind:
    """Classify a failed write by its cause, never by how many batches failed.

    `refused`: the database will refuse this input every time (constraint, value out of
    range, bad type): answer 400, the agent drops the batch. `retry`: lost connection,
    lock or statement time-out, server shutting down, disk full, anything unknown:
    answer 503, the agent resends — a transient error must never cost data.
    """
    if isinstance(exc, (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.InterfaceError)):
        return "refused"
    if isinstance(exc, sqlite3.Error):
        return "retry"  # OperationalError: locked, I/O, full
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a dependency
        psycopg = None  # type: ignore[assignment]
    if psycopg is not None:
        # "no partition of relation … found for row" (SQLSTATE 23514, an IntegrityError):
        # the row's time partition is not made yet (fleet/storage/partitions.py); the
        # resend lands once it is.
        if isinstance(exc, psycopg.errors.CheckViolation) and "no partition of relation" in str(
            exc
        ):
            return "retry"
        if isinstance(exc, (psycopg.IntegrityError, psycopg.DataError)):
            return "refused"
        if isinstance(exc, psycopg.Error):
            return "retry"  # OperationalError (lock_timeout, AdminShutdown), InterfaceError
    if isinstance(exc, _REFUSED_PY):
        return "refused"
    return "retry"


def is_database_error(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error):
        return True
    try:
        import psycopg
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, psycopg.Error)
