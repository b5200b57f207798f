"""A maintenance task's pass run by hand (`fleetwatch manage rollup`, `… retention`)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from django.core.management.base import BaseCommand


class MaintenancePassCommand(BaseCommand):
    """Runs `run_pass` at --now (default: now) and prints each table's count, naming
    `counted`; a table the pass left alone is not printed."""

    now_help: str
    counted: str

    def run_pass(self, now: float) -> dict[str, int]:
        raise NotImplementedError

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--now", type=float, help=self.now_help)

    def handle(self, *args: Any, **opts: Any) -> None:
        now = time.time() if opts["now"] is None else opts["now"]
        for table, rows in self.run_pass(now).items():
            if rows:
                self.stdout.write(f"{table}: {rows} {self.counted}")
