"""Reinstall the built-in rule pack after the fabric rules (fleet/alerts/rulepack_fabric.py)
and the further time-to-limit rules (fleet/alerts/rulepack_forecast.py) joined it. The
installer's three-way merge keeps every field an operator edited (docs/rules.md, "Editing
and installing")."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from fleet.alerts.install import install_rule_pack

    install_rule_pack(apps.get_model("alerts", "AlertRule"))


class Migration(migrations.Migration):
    dependencies = [("alerts", "0011_rule_pack_forecasts")]

    # Reversing leaves the rules: they may carry an operator's edits.
    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
