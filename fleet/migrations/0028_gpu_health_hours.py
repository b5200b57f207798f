"""Each GPU's health hours (`fw_gpu_health_1h`, fleet/storage/health_hours.py): the resets,
thermal slowdown time and hot hours its health record adds up over 30 days, one sparse row
per GPU and hour with any of them, written by the hourly GPU rollup from now on.

Filled here for the 30 days before the hourly tier's progress, so the record keeps its
history: resets from the 1-minute tier where it still keeps the hours, from the hourly tier
before that (as the record read them until now). New table only: works on a populated
database of either engine; costs one read of 30 days of the GPU tiers.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

RECORD_WINDOW_S = 30 * 86_400  # fleet.health.record.RECORD_WINDOW_S when this was written


def forwards(apps: Any, schema_editor: Any) -> None:
    from fleet.storage import health_hours

    schema_editor.execute(health_hours.create_sql(schema_editor.connection.vendor))
    with schema_editor.connection.cursor() as cur:
        cur.execute("SELECT done_until FROM fw_rollup_state WHERE tier = '1h' AND kind = 'gpu'")
        row = cur.fetchone()
        health_hours.fill_history(cur, int(row[0]) if row and row[0] else 0, RECORD_WINDOW_S)


def backwards(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute("DROP TABLE fw_gpu_health_1h")


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0027_fabric_port_judged"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
