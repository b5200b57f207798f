"""PostgreSQL: raw tables partitioned by hour on `ts`, 1m by day and 1h by month on `bucket`.

Converts an existing, populated installation without copying rows: each table is renamed
`<table>_legacy` (its indexes too), a partitioned parent with the same columns and keys takes
its name, and the old table is attached as ONE partition covering everything up to a boundary
past its newest row and past now (FROM MINVALUE). Retention drops that legacy partition as a
whole once all of it has expired and been summarised. Partitions from the boundary on (and,
on a fresh install, from each tier's retention horizon on) are made ahead of time, so ingest
works before the beat's first `fleet.partitions` run. An empty old table (a fresh install) is
dropped instead of attached.

The ATTACH of a populated table scans it once to check its rows fit the range, and finding
the newest row is another scan (no btree on time): minutes for hours of a large fleet, once.
SQLite: nothing to do (no partitions there).
"""

from __future__ import annotations

import time
from typing import Any

from django.db import migrations

from fleet.storage import schema
from fleet.storage.partitions import (
    MINVALUE,
    attach_sql,
    ensure_partitions,
    families,
    legacy_name,
    slot,
)


def _rename_with_indexes(cur: Any, table: str, new: str) -> None:
    cur.execute(f"ALTER TABLE {table} RENAME TO {new}")
    cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", [new])
    for (index,) in cur.fetchall():
        if index.startswith(table):
            cur.execute(f"ALTER INDEX {index} RENAME TO {new}{index[len(table) :]}")


def _partition(cur: Any, kind: str, tier: str, table: str, now: float) -> None:
    legacy = legacy_name(table)
    _rename_with_indexes(cur, table, legacy)
    for statement in schema.create_partitioned_like(table, legacy, kind, tier):
        cur.execute(statement)
    column = schema.partition_column(tier)
    cur.execute(f"SELECT max({column}) FROM {legacy}")
    newest = cur.fetchone()[0]
    if newest is None:
        cur.execute(f"DROP TABLE {legacy}")
        return
    _, boundary = slot(tier, max(float(newest), now))
    cur.execute(attach_sql(table, legacy, MINVALUE, boundary))


def forwards(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    now = time.time()
    with connection.cursor() as cur:
        for family in families():
            _partition(cur, family.kind, family.tier, family.table, now)
    ensure_partitions(now, using=connection.alias)


def backwards(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cur:
        for family in families():
            flat = f"{family.table}_flat"
            for statement in schema.create_unpartitioned_like(
                flat, family.table, family.kind, family.tier
            )[:1]:
                cur.execute(statement)
            cur.execute(f"INSERT INTO {flat} SELECT * FROM {family.table}")
            cur.execute(f"DROP TABLE {family.table}")
            cur.execute(f"ALTER TABLE {flat} RENAME TO {family.table}")
            for statement in schema.time_table_keys(family.table, family.kind, family.tier):
                cur.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("fleet", "0015_rollup_late_marks")]
    operations = [migrations.RunPython(forwards, backwards)]
