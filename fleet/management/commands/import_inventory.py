"""`manage.py import_inventory FILE`: the inventory from YAML or JSON, all or nothing."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fleet.inventory_io import InventoryError, import_inventory_file


class Command(BaseCommand):
    help = (
        "Create or update sites, halls, racks, feeds, loops, meters, nodes and GPUs from a "
        ".yaml/.yml or .json file (docs/inventory.md). Nothing changes unless every entry is "
        "valid; importing the same file again changes nothing."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument(
            "--dry-run", action="store_true", help="check everything, then roll back"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        path: Path = opts["file"]
        try:
            report = import_inventory_file(path, dry_run=opts["dry_run"])
        except InventoryError as exc:
            # CommandError goes to stderr and exits 1 when run from the command line.
            count = len(exc.problems)
            raise CommandError(
                f"{path}: nothing imported, {count} problem{'s' * (count != 1)}:\n{exc}"
            ) from exc
        verb = "checked (dry run, nothing written)" if opts["dry_run"] else "imported"
        self.stdout.write(f"{path}: {verb}")
        for line in report.lines():
            self.stdout.write(f"  {line}")
