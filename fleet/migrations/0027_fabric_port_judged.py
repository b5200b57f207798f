"""What the fabric rules judge, kept per port by the ingest writer (fleet/storage/fabric.py,
fleet/health/fabric.py): when it was last ACTIVE, and the two checkpoints its error rates are
measured from. New nullable/defaulted columns: works on a populated database of either
engine; existing ports start judging at their next read."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0026_gpu_share"),
    ]

    operations = [
        migrations.AddField(
            model_name="fabricport",
            name="last_active",
            field=models.FloatField(
                blank=True,
                help_text="epoch seconds of the newest read that found it ACTIVE",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="fabricport",
            name="rate_base",
            field=models.JSONField(
                default=dict,
                help_text="rate checkpoint: {ts, rises} the error rates are measured from",
            ),
        ),
        migrations.AddField(
            model_name="fabricport",
            name="rate_next",
            field=models.JSONField(
                default=dict, help_text="the next rate checkpoint, the base once RATE_WINDOW_S old"
            ),
        ),
    ]
