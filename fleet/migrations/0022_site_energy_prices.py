# Per-site grid carbon intensity, energy tariff and GPU-hour price for the energy ledger
# (issue 21, item 3; fleet/read/ledger.py).
import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0021_workload_intervals"),
    ]

    operations = [
        migrations.AddField(
            model_name="site",
            name="currency",
            field=models.CharField(blank=True, help_text="ISO 4217 code, e.g. EUR", max_length=3),
        ),
        migrations.AddField(
            model_name="site",
            name="gpu_hour_price",
            field=models.FloatField(
                blank=True,
                help_text="optional: charged per GPU-hour held, on top of energy",
                null=True,
                validators=[django.core.validators.MinValueValidator(0)],
                verbose_name="GPU-hour price",
            ),
        ),
        migrations.AddField(
            model_name="site",
            name="grid_gco2_per_kwh",
            field=models.FloatField(
                blank=True,
                help_text="the grid's carbon intensity at this site, a constant",
                null=True,
                validators=[django.core.validators.MinValueValidator(0)],
                verbose_name="grid carbon intensity (gCO2/kWh)",
            ),
        ),
        migrations.AddField(
            model_name="site",
            name="tariff_per_kwh",
            field=models.FloatField(
                blank=True,
                help_text="what a kWh costs at this site, in the site's currency",
                null=True,
                validators=[django.core.validators.MinValueValidator(0)],
                verbose_name="energy tariff (per kWh)",
            ),
        ),
    ]
