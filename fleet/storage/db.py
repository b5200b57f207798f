"""The storage connection of a process that writes samples, per database engine.

Runs in the ingest child process (and any other writer of samples) with its own
DB-API connection, not Django's ORM: measured here, per-row ORM work is ~10x
slower than raw statements. `fleet/storage/samples.py` says *what* one commit
stores; this module says how each engine does it fast.

- SQLite: multi-row `INSERT OR IGNORE` inside one `BEGIN IMMEDIATE` transaction.
  The ts-first primary key makes a resend a no-op.
- PostgreSQL: binary COPY straight into the raw tables; a resend collides with the
  primary key, so on UniqueViolation the whole transaction is redone with the raw
  rows going through a temp stage and `INSERT … ON CONFLICT DO NOTHING` (measured
  52–62k rows/s direct, 32–34k staged). A lost connection (database restart,
  failover) is dropped and reopened, with a connect time-out, on the next use.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from agents.protocol.metrics import METRICS
from fleet.storage.dialect import placeholders
from fleet.storage.schema import ENTITY_COLUMNS, raw_table

log = logging.getLogger("fleet.storage")

Row = tuple[Any, ...]
T = TypeVar("T")

# SQLite (>= 3.32) allows 32766 bound parameters per statement.
_SQLITE_MAX_PARAMS = 32766
# A commit that waits this long for a lock is answered 503 (retry), not left hanging.
PG_LOCK_TIMEOUT_MS = 10_000
PG_CONNECT_TIMEOUT_S = 5

EVENT_SQL_COLUMNS = ("source", "seq", "pos", "ts", "node_id", "gpu_index", "kind", "code", "detail")


def raw_columns(kind: str) -> tuple[str, ...]:
    return ("ts", *ENTITY_COLUMNS[kind], *(m.name for m in METRICS[kind]))


@dataclass(frozen=True, slots=True)
class Upsert:
    """An `INSERT … ON CONFLICT (keys) DO UPDATE SET set_clause` of `columns` into `table`;
    `types` (PostgreSQL names, one per column) lets PostgreSQL take the rows in binary."""

    table: str
    columns: tuple[str, ...]
    keys: tuple[str, ...]
    set_clause: str
    types: tuple[str, ...] = ()


class Tx(Protocol):
    """What one transaction can do; every method runs inside it."""

    vendor: str

    def insert_raw(self, kind: str, columns: tuple[str, ...], rows: list[Row]) -> None: ...

    def insert_events(self, rows: list[Row]) -> None: ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def upsert(self, spec: Upsert, rows: list[Row]) -> None:
        """`INSERT … ON CONFLICT (keys) DO UPDATE SET …` for many rows, set-based
        (rows must have distinct keys; `excluded.` names the incoming row)."""

    def upsert_shapes(self, spec: Upsert, shapes: Sequence[tuple[Upsert, list[Row]]]) -> None:
        """Upsert rows that come in several shapes — each its own `Upsert` over some of
        `spec`'s columns, a column a shape lacks being NULL — locking the rows in one key
        order across every shape (PostgreSQL: one statement of `spec`; an engine with one
        writer at a time may run each shape's own)."""


class Database(Protocol):
    vendor: str

    def transaction(self, work: Callable[[Tx], T]) -> T:
        """Run `work` in one transaction and commit; return only once it is durable.
        On any failure nothing of it is stored and the exception propagates."""

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        """One statement in its own transaction (reads, small bookkeeping)."""

    def close(self) -> None: ...


class SqliteDb:
    vendor = "sqlite"

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=30, check_same_thread=False)
        for pragma in (
            "PRAGMA journal_mode=WAL",
            "PRAGMA synchronous=FULL",
            "PRAGMA busy_timeout=30000",
            "PRAGMA cache_size=-65536",
        ):
            self.conn.execute(pragma)
        self._insert_sql: dict[tuple[str, tuple[str, ...], int], str] = {}

    def transaction(self, work: Callable[[Tx], T]) -> T:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            result = work(self)
            self.conn.execute("COMMIT")
            return result
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self.conn.execute(placeholders(sql, self.vendor), params).fetchall()

    # -- Tx -------------------------------------------------------------------------
    def insert_raw(self, kind: str, columns: tuple[str, ...], rows: list[Row]) -> None:
        table = raw_table(kind)
        per_stmt = max(1, _SQLITE_MAX_PARAMS // len(columns))
        for start in range(0, len(rows), per_stmt):
            chunk = rows[start : start + per_stmt]
            params = [v for row in chunk for v in row]
            self.conn.execute(self._insert(table, columns, len(chunk)), params)

    def insert_events(self, rows: list[Row]) -> None:
        cols = ",".join(EVENT_SQL_COLUMNS)
        self.conn.executemany(
            f"INSERT OR IGNORE INTO fleet_event ({cols}) VALUES ({','.join('?' * 9)})", rows
        )

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self.conn.execute(placeholders(sql, self.vendor), params).fetchall()

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(placeholders(sql, self.vendor), rows)

    def upsert_shapes(self, spec: Upsert, shapes: Sequence[tuple[Upsert, list[Row]]]) -> None:
        # One writer at a time (BEGIN IMMEDIATE): no lock order to keep, so each shape binds
        # only its own columns.
        for shape, rows in shapes:
            self.upsert(shape, rows)

    def upsert(self, spec: Upsert, rows: list[Row]) -> None:
        # Multi-row VALUES: one statement per ~32k bound values instead of one per row.
        per_stmt = max(1, _SQLITE_MAX_PARAMS // len(spec.columns))
        one = "(" + ",".join("?" * len(spec.columns)) + ")"
        for start in range(0, len(rows), per_stmt):
            chunk = rows[start : start + per_stmt]
            sql = (
                f"INSERT INTO {spec.table} ({','.join(spec.columns)})"
                f" VALUES {','.join([one] * len(chunk))}"
                f" ON CONFLICT ({','.join(spec.keys)}) DO UPDATE SET {spec.set_clause}"
            )
            self.conn.execute(sql, [v for row in chunk for v in row])

    def _insert(self, table: str, columns: tuple[str, ...], nrows: int) -> str:
        key = (table, columns, nrows)
        sql = self._insert_sql.get(key)
        if sql is None:
            one = "(" + ",".join("?" * len(columns)) + ")"
            sql = f"INSERT OR IGNORE INTO {table} ({','.join(columns)}) VALUES " + ",".join(
                [one] * nrows
            )
            if len(self._insert_sql) > 512:
                self._insert_sql.clear()
            self._insert_sql[key] = sql
        return sql

    def close(self) -> None:
        self.conn.close()


class _PgTx:
    """One PostgreSQL transaction; `staged` routes raw rows through ON CONFLICT."""

    vendor = "postgresql"

    def __init__(self, cur: Any, types: dict[str, dict[str, str]], staged: bool) -> None:
        self.cur = cur
        self.types = types
        self.staged = staged

    def insert_raw(self, kind: str, columns: tuple[str, ...], rows: list[Row]) -> None:
        table = raw_table(kind)
        if not self.staged:
            self._copy(table, kind, columns, rows)
            return
        stage = f"stage_{kind}"
        self.cur.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {stage} (LIKE {table} INCLUDING DEFAULTS) "
            "ON COMMIT DELETE ROWS"
        )
        self._copy(stage, kind, columns, rows)
        cols = ",".join(columns)
        self.cur.execute(
            f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {stage} ON CONFLICT DO NOTHING"
        )
        self.cur.execute(f"TRUNCATE {stage}")

    def _copy(self, table: str, kind: str, columns: tuple[str, ...], rows: Iterable[Row]) -> None:
        types = self.types[kind]
        sql = f"COPY {table} ({','.join(columns)}) FROM STDIN (FORMAT BINARY)"
        with self.cur.copy(sql) as copy:
            copy.set_types([types[c] for c in columns])
            for row in rows:
                copy.write_row(row)

    def upsert(self, spec: Upsert, rows: list[Row]) -> None:
        self.upsert_shapes(spec, [(spec, rows)])

    def upsert_shapes(self, spec: Upsert, shapes: Sequence[tuple[Upsert, list[Row]]]) -> None:
        # COPY into a temp stage, then one INSERT … SELECT … ON CONFLICT: set-based, where
        # executemany costs a statement per row (measured: ~2x slower per entity). Each shape
        # is copied with its own columns (the stage leaves the others NULL), so no row is
        # widened and no NULL is sent.
        stage = f"stage_{spec.table}"
        self.cur.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {stage} (LIKE {spec.table}) ON COMMIT DELETE ROWS"
        )
        for shape, rows in shapes:
            binary = " (FORMAT BINARY)" if shape.types else ""
            columns = ",".join(shape.columns)
            with self.cur.copy(f"COPY {stage} ({columns}) FROM STDIN{binary}") as copy:
                if shape.types:
                    copy.set_types(list(shape.types))
                for row in rows:
                    copy.write_row(row)
        # One statement, rows in key order: two writers merging overlapping entities (a node
        # whose batches a proxy spreads over two server processes) lock their rows in the
        # same order and cannot deadlock (measured: 12 deadlocks between two ingest children
        # in a 10-minute 10k-GPU run when rows went in arrival order; one statement per shape
        # deadlocked too, an entity's shape differing between the writers).
        cols = ",".join(spec.columns)
        self.cur.execute(
            f"INSERT INTO {spec.table} ({cols}) SELECT {cols} FROM {stage}"
            f" ORDER BY {','.join(spec.keys)}"
            f" ON CONFLICT ({','.join(spec.keys)}) DO UPDATE SET {spec.set_clause}"
        )
        self.cur.execute(f"TRUNCATE {stage}")

    def insert_events(self, rows: list[Row]) -> None:
        cols = ",".join(EVENT_SQL_COLUMNS)
        self.cur.executemany(
            f"INSERT INTO fleet_event ({cols}) VALUES ({','.join(['%s'] * 9)}) "
            "ON CONFLICT DO NOTHING",
            rows,
        )

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self.cur.execute(sql, params)
        return list(self.cur.fetchall()) if self.cur.description else []

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.cur.executemany(sql, rows)


class PostgresDb:
    vendor = "postgresql"

    def __init__(self, conninfo: str, lock_timeout_ms: int = PG_LOCK_TIMEOUT_MS) -> None:
        import psycopg

        self._psycopg = psycopg
        self.conninfo = conninfo
        self.lock_timeout_ms = lock_timeout_ms
        self._conn: Any = None
        self._types = {kind: _pg_types(kind) for kind in METRICS}
        self.reconnects = 0
        self.deadlocks = 0  # transactions run again after PostgreSQL broke a deadlock

    def _connection(self) -> Any:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        if conn is not None:
            self.reconnects += 1
            log.warning("database connection lost; reconnecting")
            conn.close()
            self._conn = None
        # The ack promises durability: ask for it rather than trust the server default.
        self._conn = self._psycopg.connect(
            self.conninfo,
            autocommit=False,
            connect_timeout=PG_CONNECT_TIMEOUT_S,
            options=f"-c synchronous_commit=on -c lock_timeout={self.lock_timeout_ms}",
        )
        return self._conn

    def transaction(self, work: Callable[[Tx], T]) -> T:
        """Run `work` in one transaction and commit it. A transaction PostgreSQL picked as
        a deadlock's victim is rolled back and run again, once: the other side has its locks
        by then (writers take them in one order, so this is a backstop, counted in
        `deadlocks`; a second deadlock is raised, and the ingest answers 503)."""
        try:
            return self._attempt(work)
        except self._psycopg.errors.DeadlockDetected as exc:
            self.deadlocks += 1
            log.warning("transaction chosen as a deadlock's victim; running it again: %s", exc)
            return self._attempt(work)

    def _attempt(self, work: Callable[[Tx], T]) -> T:
        conn = self._connection()
        try:
            return self._run(conn, work, staged=False)
        except self._psycopg.errors.UniqueViolation:
            # A resend: redo the whole transaction through the stage, skipping duplicates.
            self._rollback(conn)
            try:
                return self._run(conn, work, staged=True)
            except BaseException:
                self._rollback(conn)
                raise
        except BaseException:
            self._rollback(conn)
            raise

    def _run(self, conn: Any, work: Callable[[Tx], T], staged: bool) -> T:
        with conn.cursor() as cur:
            result = work(_PgTx(cur, self._types, staged))
        conn.commit()
        return result

    def _rollback(self, conn: Any) -> None:
        with contextlib.suppress(self._psycopg.Error):
            conn.rollback()  # may fail when the connection is gone; the next use reconnects

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self.transaction(lambda tx: tx.execute(sql, params))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def _pg_types(kind: str) -> dict[str, str]:
    types = {"ts": "float8"} | {key: "int4" for key in ENTITY_COLUMNS[kind]}
    return types | {m.name: "int8" if m.integer else "float8" for m in METRICS[kind]}


def pg_tx_on(cursor: Any) -> Tx:
    """The ingest writer's PostgreSQL transaction (binary COPY through a temp stage, ON
    CONFLICT, so a row stored before is skipped) on a psycopg cursor someone else's
    transaction owns: the Prometheus pull runs it on Django's
    (fleet/ingest/prometheus/pull_db.py)."""
    return _PgTx(cursor, {kind: _pg_types(kind) for kind in METRICS}, staged=True)


def open_db(db: dict[str, Any], lock_timeout_ms: int = PG_LOCK_TIMEOUT_MS) -> Database:
    """A storage connection for a Django DATABASES entry."""
    engine = db["ENGINE"]
    if engine.endswith("sqlite3"):
        return SqliteDb(str(db["NAME"]))
    if engine.endswith("postgresql"):
        return PostgresDb(pg_conninfo(db), lock_timeout_ms)
    raise ValueError(f"unsupported database engine {engine}")


def pg_conninfo(db: dict[str, Any]) -> str:
    """libpq connection string for a Django DATABASES entry (quoting done by psycopg)."""
    from psycopg.conninfo import make_conninfo

    parts = {
        "dbname": db.get("NAME"),
        "user": db.get("USER"),
        "password": db.get("PASSWORD"),
        "host": db.get("HOST"),
        "port": db.get("PORT"),
    }
    # Only libpq's own options; Django-only ones (e.g. pool settings) would break it.
    options = db.get("OPTIONS") or {}
    parts |= {k: v for k, v in options.items() if k in _LIBPQ_OPTIONS}
    return make_conninfo(**{k: str(v) for k, v in parts.items() if v not in (None, "")})


_LIBPQ_OPTIONS = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "connect_timeout",
        "application_name",
        "target_session_attrs",
        "options",
        "passfile",
        "service",
        "channel_binding",
        "gssencmode",
        "keepalives",
        "keepalives_idle",
    }
)
