"""Install the built-in rule pack, so `migrate` (and `make demo`) has it.

A later pack change ships as another migration calling the installer again (or an
operator runs `manage.py install_rule_pack`); edited fields are never overwritten.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from fleet.alerts.install import install_rule_pack

    install_rule_pack(apps.get_model("alerts", "AlertRule"))


class Migration(migrations.Migration):
    dependencies = [("alerts", "0001_initial")]

    # Reversing leaves the rules: they may carry an operator's edits.
    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
