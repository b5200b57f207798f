"""Late-data marks per entity and minute, and the rollup's seal (#12).

- `fw_<kind>_late` per kind (`fleet.storage.late`): append-only marks that say which
  (entity, bucket) a rollup tier must compute again.
- `fw_rollup_state.sealed_until`: raw rows with a minute before it may already have been
  summarised, so a commit storing one leaves a mark. Starts at `done_until`.
- `dirty_from` is no longer used: a range it still marks is folded into `done_until`
  (`done_until = min(done_until, dirty_from)`), so the next rollup computes it again,
  and it is set to NULL. The column stays (unused) for code that still reads it.

Works on a populated database of either engine: it adds a nullable column, new tables
and rewrites the few state rows.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from fleet.storage import late

KINDS = ("gpu", "node", "rack", "feed", "loop", "facility")


def forwards(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    for kind in KINDS:
        for statement in late.create_late(kind, vendor):
            schema_editor.execute(statement)
    schema_editor.execute("ALTER TABLE fw_rollup_state ADD COLUMN sealed_until BIGINT")
    schema_editor.execute(
        "UPDATE fw_rollup_state SET done_until = CASE WHEN dirty_from IS NOT NULL"
        " AND dirty_from < done_until THEN dirty_from ELSE done_until END, dirty_from = NULL"
    )
    schema_editor.execute("UPDATE fw_rollup_state SET sealed_until = done_until")


def backwards(apps: Any, schema_editor: Any) -> None:
    # Pending marks cannot be expressed as one watermark per kind without losing which
    # entities they name: fold them into dirty_from (the old design recomputes more).
    for kind in KINDS:
        table = late.late_table(kind)
        for tier in ("1m", "1h"):
            schema_editor.execute(
                f"UPDATE fw_rollup_state SET dirty_from = (SELECT min(bucket) FROM {table}"
                f" WHERE tier = '{tier}') WHERE tier = '{tier}' AND kind = '{kind}'"
                f" AND EXISTS (SELECT 1 FROM {table} WHERE tier = '{tier}')"
            )
        for statement in late.drop_late(kind):
            schema_editor.execute(statement)
    schema_editor.execute("ALTER TABLE fw_rollup_state DROP COLUMN sealed_until")


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0014_ingest_writers"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
