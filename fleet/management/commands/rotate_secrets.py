from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fleet.secrets import SETTING, SecretError, rotate_all


class Command(BaseCommand):
    help = (
        f"Re-encrypt every stored secret under the first key of {SETTING} (and encrypt any"
        " left in clear); afterwards the older keys can be removed. All or nothing."
    )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            done = rotate_all()
        except SecretError as exc:
            raise CommandError(f"{exc}; nothing was changed") from None
        for label, count in done.items():
            self.stdout.write(f"{label}: {count} secrets re-encrypted")
