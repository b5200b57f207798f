"""The one write path (`fleet.storage.samples.write_samples`) over Django's connection.

The pull runs inside a Celery worker or a management command, where Django already holds
the connection (and, in tests, the test database's transaction): a second DB-API
connection of its own (`fleet.storage.db.open_db`) would not see that data and, on
SQLite, would wait for the same write lock. So this adapter gives `write_samples` the
`Database`/`Tx` it expects on top of `django.db.connection`: on SQLite multi-row
`INSERT … ON CONFLICT …` statements, on PostgreSQL the ingest writer's own COPY-based
transaction (`fleet.storage.db`) on Django's psycopg cursor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from fleet.storage.db import EVENT_SQL_COLUMNS, Row, Upsert, pg_tx_on
from fleet.storage.dialect import POSTGRESQL
from fleet.storage.schema import raw_table

T = TypeVar("T")

# Bound parameters per statement: SQLite (≥ 3.32) takes 32766, PostgreSQL 65535.
_MAX_PARAMS = 32000


class DjangoDb:
    """`fleet.storage.db.Database` and `Tx` in one, over one Django database alias."""

    def __init__(self, using: str = DEFAULT_DB_ALIAS) -> None:
        self.using = using
        self.vendor = connections[using].vendor

    # -- Database ---------------------------------------------------------------
    def transaction(self, work: Callable[[Any], T]) -> T:
        with transaction.atomic(using=self.using):
            if self.vendor != POSTGRESQL:
                return work(self)
            # PostgreSQL: the ingest writer's own transaction (binary COPY through a temp
            # stage, ON CONFLICT) on Django's psycopg cursor. Binding tens of thousands of
            # parameters per INSERT instead took 2.7 s for 8,000 GPUs (bench/prometheus.py).
            with connections[self.using].cursor() as cur:
                return work(pg_tx_on(cur.cursor))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self.execute(sql, params)

    def close(self) -> None:
        """Django owns the connection."""

    # -- Tx -----------------------------------------------------------------------
    def insert_raw(self, kind: str, columns: tuple[str, ...], rows: list[Row]) -> None:
        # A sample pulled twice (overlapping pull windows) is keyed by (entity, ts): stored once.
        self._insert_many(raw_table(kind), columns, rows, "ON CONFLICT DO NOTHING")

    def insert_events(self, rows: list[Row]) -> None:
        self._insert_many("fleet_event", EVENT_SQL_COLUMNS, rows, "ON CONFLICT DO NOTHING")

    def upsert(self, spec: Upsert, rows: list[Row]) -> None:
        conflict = f"ON CONFLICT ({','.join(spec.keys)}) DO UPDATE SET {spec.set_clause}"
        self._insert_many(spec.table, spec.columns, rows, conflict)

    def upsert_shapes(self, spec: Upsert, shapes: Sequence[tuple[Upsert, list[Row]]]) -> None:
        # SQLite only (PostgreSQL goes through the ingest writer's own Tx): one writer at a
        # time, so each shape binds only its own columns.
        for shape, rows in shapes:
            self.upsert(shape, rows)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with connections[self.using].cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []

    def execute_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with connections[self.using].cursor() as cur:
            cur.executemany(sql, rows)

    def _insert_many(self, table: str, columns: Sequence[str], rows: list[Row], tail: str) -> None:
        if not rows:
            return
        cols = ",".join(columns)
        mark = "(" + ",".join(["%s"] * len(columns)) + ")"
        per_stmt = max(1, _MAX_PARAMS // len(columns))
        with connections[self.using].cursor() as cur:
            for start in range(0, len(rows), per_stmt):
                chunk = rows[start : start + per_stmt]
                values = ",".join([mark] * len(chunk))
                params = [v for row in chunk for v in row]
                cur.execute(f"INSERT INTO {table} ({cols}) VALUES {values} {tail}", params)
