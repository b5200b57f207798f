# Each source's own cadence (docs/protocol.md `cadence`; fleet.health.cadence).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0017_ingest_writer_too_old"),
    ]

    operations = [
        migrations.AddField(
            model_name="sourcetoken",
            name="sample_interval_s",
            field=models.FloatField(
                blank=True,
                editable=False,
                help_text="seconds between samples, as declared",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="sourcetoken",
            name="batch_interval_s",
            field=models.FloatField(
                blank=True,
                editable=False,
                help_text="seconds between batches, as declared",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="sourcetoken",
            name="field_intervals_s",
            field=models.JSONField(
                blank=True,
                default=dict,
                editable=False,
                help_text="fields refreshed less often than every sample: metric → seconds,"
                " as declared",
            ),
        ),
        migrations.AddField(
            model_name="prometheussource",
            name="pull_interval_s",
            field=models.FloatField(
                blank=True, editable=False, help_text="seconds between pulls", null=True
            ),
        ),
    ]
