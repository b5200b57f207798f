"""Latest state merged per field: every metric gets its own sample time (`<metric>_ts`).

Existing rows keep their values; each present value is given the row's `ts`, which
is what the old shape claimed for all of them.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from fleet.migrations import _frozen
from fleet.storage import schema


def _rebuild(schema_editor: Any, per_field: bool) -> None:
    vendor = schema_editor.connection.vendor
    for kind, columns in _frozen.COLUMNS_0002.items():
        table = schema.latest_table(kind)
        keys = schema.ENTITY_COLUMNS[kind]
        metrics = [name for name, _ in columns]
        schema_editor.execute(f"ALTER TABLE {table} RENAME TO {table}_old")
        create = schema.create_latest if per_field else schema.create_latest_v1
        for statement in create(kind, columns, vendor):
            schema_editor.execute(statement)
        if per_field:
            targets = [*keys, "ts", *metrics]
            targets += [schema.field_ts_column(m) for m in metrics]
            values = [*keys, "ts", *metrics]
            values += [f"CASE WHEN {m} IS NOT NULL THEN ts END" for m in metrics]
        else:
            targets = values = [*keys, "ts", *metrics]
        schema_editor.execute(
            f"INSERT INTO {table} ({', '.join(targets)}) "
            f"SELECT {', '.join(values)} FROM {table}_old"
        )
        schema_editor.execute(f"DROP TABLE {table}_old")


def forwards(apps: Any, schema_editor: Any) -> None:
    _rebuild(schema_editor, per_field=True)


def backwards(apps: Any, schema_editor: Any) -> None:
    _rebuild(schema_editor, per_field=False)


class Migration(migrations.Migration):
    dependencies = [("fleet", "0005_event_key_with_ts")]
    operations = [migrations.RunPython(forwards, backwards)]
