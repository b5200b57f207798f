"""Remote write's cursor per sample kind (`RemoteWriteCursor`, fleet/models/remote_write.py;
fleet/remote_write/ship.py). New table only."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0029_database_size"),
    ]

    operations = [
        migrations.CreateModel(
            name="RemoteWriteCursor",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        help_text="sample kind: gpu, node, …", max_length=16, unique=True
                    ),
                ),
                ("ts", models.FloatField(help_text="epoch s of the last row shipped", null=True)),
                ("entity", models.JSONField(default=list, help_text="its entity key (ids)")),
                (
                    "complete_until",
                    models.FloatField(help_text="every settled row before it is shipped"),
                ),
                (
                    "shipped_samples",
                    models.BigIntegerField(default=0, help_text="accepted by the receiver (2xx)"),
                ),
                (
                    "dropped_samples",
                    models.BigIntegerField(
                        default=0,
                        help_text="refused for good by the receiver (4xx other than 429), not resent",
                    ),
                ),
                (
                    "last_success_at",
                    models.FloatField(help_text="epoch s of the last 2xx", null=True),
                ),
                (
                    "failures",
                    models.PositiveIntegerField(default=0, help_text="passes failed in a row"),
                ),
                (
                    "retry_at",
                    models.FloatField(help_text="no pass before this (backoff)", null=True),
                ),
                ("last_error", models.TextField(blank=True)),
            ],
            options={
                "verbose_name": "remote write cursor",
                "ordering": ("kind",),
            },
        ),
    ]
