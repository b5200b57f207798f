"""Statements of one commit run in order, a run of the same statement as one pipelined
`executemany` (the ingest child's per-source updates), on both engines."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.storage.db import Database, Row, SqliteDb, open_db
from fleet.storage.samples import run_statements
from fleetwatch.env import database_from_url
from tests.support import services

INSERT = "INSERT INTO seen (source, seq) VALUES (%s, %s)"
UPDATE = "UPDATE seen SET seq = %s WHERE source = %s"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        made: Database = SqliteDb(str(tmp_path / "t.sqlite3"))
        yield made
        made.close()
        return
    admin = services.services_database_url()
    name = f"fwtest_{uuid.uuid4().hex[:10]}"
    made = open_db(database_from_url(services.create_database(admin, name)))
    try:
        yield made
    finally:
        made.close()
        services.drop_database(admin, name)


def seqs(db: Database) -> dict[str, int]:
    return dict(db.query("SELECT source, seq FROM seen"))  # type: ignore[arg-type]


def test_runs_of_the_same_statement_apply_every_row_in_order(db: Database) -> None:
    db.transaction(lambda tx: tx.execute("CREATE TABLE seen (source TEXT PRIMARY KEY, seq INT)"))
    statements: list[tuple[str, Row]] = [(INSERT, (f"node:n{i:03d}", i)) for i in range(300)]
    statements += [(UPDATE, (1000 + i, f"node:n{i:03d}")) for i in range(0, 300, 2)]
    statements += [(INSERT, ("node:late", 7)), (UPDATE, (8, "node:late"))]

    db.transaction(lambda tx: run_statements(tx, statements))

    stored = seqs(db)
    assert len(stored) == 301
    assert stored["node:n000"] == 1000 and stored["node:n001"] == 1
    assert stored["node:n298"] == 1298 and stored["node:n299"] == 299
    assert stored["node:late"] == 8  # the update after its insert, not before


def test_a_failing_row_in_a_run_stores_nothing_of_the_commit(db: Database) -> None:
    db.transaction(lambda tx: tx.execute("CREATE TABLE seen (source TEXT PRIMARY KEY, seq INT)"))
    statements: list[tuple[str, Row]] = [(INSERT, ("node:a", 1)), (INSERT, ("node:b", 2))]
    statements.append((INSERT, ("node:a", 3)))

    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        db.transaction(lambda tx: run_statements(tx, statements))

    assert seqs(db) == {}
