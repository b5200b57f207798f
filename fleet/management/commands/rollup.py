from __future__ import annotations

import argparse
import time
from typing import Any

from django.core.management.base import BaseCommand

from fleet.storage.rollups import rollup_all


class Command(BaseCommand):
    help = "Bring the 1-minute and 1-hour rollups up to date (what the fleet.rollup task runs)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--now", type=float, help="epoch seconds to roll up to (default: now)")

    def handle(self, *args: Any, **opts: Any) -> None:
        now = time.time() if opts["now"] is None else opts["now"]
        for key, rows in rollup_all(now).items():
            if rows:
                self.stdout.write(f"{key}: {rows} rows")
