"""The packed raw tier (issue 23): `fw_<kind>_packed`, one row per entity and sealed span of
raw rows (fleet/storage/packed.py writes it, docs/storage.md describes it). New tables only;
the raw tables are unchanged. Undoing it puts every packed sample back into the raw tables
first."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from fleet.storage.packed import unpack_to_raw
from fleet.storage.schema import create_packed, packed_table

KINDS = ("gpu", "node", "rack", "feed", "loop", "facility")


def forwards(apps: Any, schema_editor: Any) -> None:
    for kind in KINDS:
        for statement in create_packed(kind, schema_editor.connection.vendor):
            schema_editor.execute(statement)


def backwards(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cur:
        for kind in KINDS:
            unpack_to_raw(cur, kind)
    for kind in KINDS:
        schema_editor.execute(f"DROP TABLE IF EXISTS {packed_table(kind)}")


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0030_remote_write_cursor"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
