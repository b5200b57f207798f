"""Reinstall the built-in rule pack after the remote-write lag rule
(fleet/alerts/rulepack_remote_write.py) joined it. The installer's three-way merge keeps every
field an operator edited (docs/rules.md, "Editing and installing")."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from fleet.alerts.install import install_rule_pack

    install_rule_pack(apps.get_model("alerts", "AlertRule"))


class Migration(migrations.Migration):
    dependencies = [("alerts", "0012_rule_pack_fabric")]

    # Reversing leaves the rules: they may carry an operator's edits.
    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
