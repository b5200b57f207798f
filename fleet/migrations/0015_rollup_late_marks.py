"""Placeholder: late-data marks per entity and minute (filled in by the storage work of #12)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0014_ingest_writers"),
    ]

    operations: list[migrations.operations.base.Operation] = []
