# Secrets at rest (fleet/secrets.py): routes' Slack webhook URLs, stored in clear until
# now, are encrypted under FLEETWATCH_SECRET_KEYS. The SLACK_WEBHOOK_URL route keeps no URL
# at all (it stays in the environment), only a keyed hash of it, to notice it change.

from django.db import migrations, models

import fleet.secrets
from fleet.notifications.models import webhook_fingerprint


def encrypt(apps, schema_editor):  # type: ignore[no-untyped-def]
    Route = apps.get_model("notifications", "Route")
    for route in Route.objects.filter(from_environment=True).exclude(webhook_url=""):
        Route.objects.filter(pk=route.pk).update(
            environment_fingerprint=webhook_fingerprint(route.webhook_url), webhook_url=""
        )
    fleet.secrets.encrypt_columns(Route, ("webhook_url",))


def decrypt(apps, schema_editor):  # type: ignore[no-untyped-def]
    # The SLACK_WEBHOOK_URL route's URL is written back on its next use.
    fleet.secrets.decrypt_columns(apps.get_model("notifications", "Route"), ("webhook_url",))


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0004_delivery_kind_recovered"),
    ]

    operations = [
        migrations.AddField(
            model_name="route",
            name="environment_fingerprint",
            field=models.CharField(
                blank=True,
                editable=False,
                max_length=64,
                verbose_name="fingerprint of SLACK_WEBHOOK_URL",
            ),
        ),
        migrations.AlterField(
            model_name="route",
            name="webhook_url",
            field=models.TextField(verbose_name="Slack webhook URL"),
        ),
        migrations.RunPython(encrypt, decrypt),
        migrations.AlterField(
            model_name="route",
            name="webhook_url",
            field=fleet.secrets.EncryptedURLField(
                help_text="A secret (anyone holding it can post): stored encrypted, shown shortened.",
                max_length=500,
                verbose_name="Slack webhook URL",
            ),
        ),
    ]
