"""`manage.py install_rule_pack`: create or update the built-in alert rules."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from fleet.alerts.install import install_rule_pack


class Command(BaseCommand):
    help = (
        "Install the built-in alert rules by key. Safe to run again: fields you edited are "
        "kept, the rest follow the pack (docs/rules.md)."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        for line in install_rule_pack().lines():
            self.stdout.write(line)
