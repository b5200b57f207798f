from __future__ import annotations

import argparse
import time
from typing import Any

from django.core.management.base import BaseCommand

from fleet.storage.retention import apply_retention


class Command(BaseCommand):
    help = "Delete rows past each tier's retention (what the fleet.retention task runs)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--now", type=float, help="epoch seconds to apply it at (default: now)")

    def handle(self, *args: Any, **opts: Any) -> None:
        now = time.time() if opts["now"] is None else opts["now"]
        for table, rows in apply_retention(now).items():
            if rows:
                self.stdout.write(f"{table}: {rows} rows deleted")
