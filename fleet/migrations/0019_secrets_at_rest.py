# Secrets at rest (fleet/secrets.py): a Prometheus source's bearer token and basic-auth
# password, stored in clear until now, are encrypted under FLEETWATCH_SECRET_KEYS. The
# columns become text first (a token is longer than the secret), then the values are
# encrypted, then the fields become the encrypted kind (no change to the column).

from django.db import migrations, models

import fleet.secrets

SECRETS = ("bearer_token", "basic_password")


def encrypt(apps, schema_editor):  # type: ignore[no-untyped-def]
    fleet.secrets.encrypt_columns(apps.get_model("fleet", "PrometheusSource"), SECRETS)


def decrypt(apps, schema_editor):  # type: ignore[no-untyped-def]
    fleet.secrets.decrypt_columns(apps.get_model("fleet", "PrometheusSource"), SECRETS)


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0018_source_cadence"),
    ]

    operations = [
        migrations.AlterField(
            model_name="prometheussource",
            name="bearer_token",
            field=models.TextField(blank=True),
        ),
        migrations.AlterField(
            model_name="prometheussource",
            name="basic_password",
            field=models.TextField(blank=True),
        ),
        migrations.RunPython(encrypt, decrypt),
        migrations.AlterField(
            model_name="prometheussource",
            name="bearer_token",
            field=fleet.secrets.EncryptedCharField(
                blank=True, help_text="sent as Bearer", max_length=500
            ),
        ),
        migrations.AlterField(
            model_name="prometheussource",
            name="basic_password",
            field=fleet.secrets.EncryptedCharField(blank=True, max_length=500),
        ),
    ]
