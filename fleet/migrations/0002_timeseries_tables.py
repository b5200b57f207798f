"""Create the time-series tables (raw, latest, 1m, 1h per sample kind) from a frozen column list."""

from __future__ import annotations

from typing import Any

from django.db import migrations

from fleet.migrations import _frozen
from fleet.storage import schema

FROZEN_COLUMNS = _frozen.COLUMNS_0002


def forwards(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    for statement in schema.create_all(FROZEN_COLUMNS, vendor):
        schema_editor.execute(statement)


def backwards(apps: Any, schema_editor: Any) -> None:
    for statement in schema.drop_all(list(FROZEN_COLUMNS)):
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("fleet", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards)]
