"""The database's size a minute (`DatabaseSize`, fleet/models/system.py): recorded by the task
fleet.forecasts for the time until the database fills its disk (docs/forecast.md). New
table only."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0028_gpu_health_hours"),
    ]

    operations = [
        migrations.CreateModel(
            name="DatabaseSize",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "minute",
                    models.BigIntegerField(
                        help_text="epoch seconds of the minute's start", unique=True
                    ),
                ),
                ("size_bytes", models.BigIntegerField()),
                ("limit_bytes", models.BigIntegerField(null=True)),
            ],
            options={
                "verbose_name": "database size",
                "ordering": ("minute",),
            },
        ),
    ]
