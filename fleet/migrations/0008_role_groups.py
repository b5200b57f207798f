"""The fleet-wide role groups: "Viewers", "Operators" and "Admins" (fleet/access.py).

Operators get `alerts.change_alertinstance` (what made an operator before these groups)
and may write silences and maintenance windows; Admins get every permission of the
inventory, alerts and notifications apps. Permissions are normally created after all
migrations, so they are created here first. Reversing keeps the groups: people may be in
them.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

OPERATOR_PERMISSIONS = (
    ("alerts", "view_alertinstance"),
    ("alerts", "change_alertinstance"),
    ("alerts", "view_silence"),
    ("alerts", "add_silence"),
    ("alerts", "change_silence"),
    ("alerts", "view_maintenancewindow"),
    ("alerts", "add_maintenancewindow"),
    ("alerts", "change_maintenancewindow"),
)
ADMIN_APPS = ("fleet", "alerts", "notifications")


def create_groups(apps: Any, schema_editor: Any) -> None:
    for config in apps.get_app_configs():
        config.models_module = True
        create_permissions(config, verbosity=0, apps=apps)
        config.models_module = None
    group = apps.get_model("auth", "Group")
    permission = apps.get_model("auth", "Permission")
    group.objects.get_or_create(name="Viewers")
    operators, _ = group.objects.get_or_create(name="Operators")
    for app_label, codename in OPERATOR_PERMISSIONS:
        operators.permissions.add(
            permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    admins, _ = group.objects.get_or_create(name="Admins")
    admins.permissions.add(*permission.objects.filter(content_type__app_label__in=ADMIN_APPS))


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0007_site_roles"),
        ("alerts", "0005_grouping_acks_silences_maintenance"),
        ("notifications", "0003_delivery_thread"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, migrations.RunPython.noop)]
