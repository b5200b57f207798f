"""Storing samples in a Django test through the production write path, `write_samples`:
the raw rows, the late-data marks and the latest-state merge in one transaction, as the
ingest pipeline stores an agent's batch (fleet/ingest/pipeline.py `_commit`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import connection, transaction

from fleet.storage.db import SqliteDb
from fleet.storage.latest import LatestDelta
from fleet.storage.samples import SampleWrite, write_samples

T = TypeVar("T")


class DjangoSqliteDb(SqliteDb):
    """The production SQLite database and transaction (fleet/storage/db.py) on the test's
    own Django connection: its transaction is a savepoint inside the test's, so what it
    stores is rolled back with the test."""

    def __init__(self) -> None:  # the test connection, no file of its own to open
        if connection.vendor != "sqlite":
            raise RuntimeError(f"Django tests run on SQLite here, not {connection.vendor}")
        connection.ensure_connection()
        self.conn = connection.connection
        self._insert_sql = {}

    def transaction(self, work: Callable[[Any], T]) -> T:
        with transaction.atomic():
            return work(self)


def store_latest(kind: str, key: tuple[int, ...], at: float, **values: Any) -> None:
    """One sample of `kind` for `key` taken at `at` and received at `at`, stored as the
    ingest pipeline stores it."""
    _write(kind, key, sampled=at, received=at, values=values)


def store(kind: str, key: tuple[int, ...], now: float, **values: Any) -> None:
    """One sample of `kind` for `key` taken a second before `now` and received at `now`
    (an agent's usual lag), stored as the ingest pipeline stores it."""
    _write(kind, key, sampled=now - 1, received=now, values=values)


def _write(
    kind: str, key: tuple[int, ...], *, sampled: float, received: float, values: dict[str, Any]
) -> None:
    sample = {"ts": sampled, **values}
    write = SampleWrite()
    write.add_samples(kind, [(key, sample)])
    latest = LatestDelta()
    latest.add(kind, key, sample, received)
    write_samples(DjangoSqliteDb(), write, latest)
