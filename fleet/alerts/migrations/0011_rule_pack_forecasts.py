"""Reinstall the built-in rule pack after the time-to-limit rules joined it
(`rack-power-forecast`: the rack's power within 60 minutes of its budget;
`loop-supply-forecast`: a CDU's supply within 30 minutes of its limit). The installer's
three-way merge keeps every field an operator edited (docs/rules.md, "Editing and
installing")."""

from __future__ import annotations

from typing import Any

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from fleet.alerts.install import install_rule_pack

    install_rule_pack(apps.get_model("alerts", "AlertRule"))


class Migration(migrations.Migration):
    dependencies = [("alerts", "0010_rule_pack_gpu_health")]

    # Reversing leaves the rules: they may carry an operator's edits.
    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
