from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections

from fleet.storage.partitions import (
    PARTITIONED_TIERS,
    describe,
    django_runner,
    ensure_between,
    ensure_partitions,
    families,
)


def _when(t: float) -> str:
    if t in (float("-inf"), float("inf")):
        return "MINVALUE" if t < 0 else "MAXVALUE"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


class Command(BaseCommand):
    help = (
        "PostgreSQL: make the time partitions of the raw and rollup tables ahead of time (what"
        " the fleet.partitions task runs), then list every partition. SQLite has none."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--now", type=float, help="epoch seconds to make them for")
        parser.add_argument(
            "--cover",
            nargs=3,
            action="append",
            metavar=("TIER", "START", "END"),
            default=[],
            help="also cover [START, END) (epoch seconds) of TIER (raw, 1m or 1h), e.g. before"
            " importing older history; repeatable",
        )
        parser.add_argument("--quiet", action="store_true", help="do not list the partitions")

    def handle(self, *args: Any, **opts: Any) -> None:
        using = DEFAULT_DB_ALIAS
        if connections[using].vendor != "postgresql":
            self.stdout.write("SQLite: tables are not partitioned; nothing to do.")
            return
        now = time.time() if opts["now"] is None else opts["now"]
        made = ensure_partitions(now, using)
        for tier, start, end in opts["cover"]:
            if tier not in PARTITIONED_TIERS:
                raise CommandError(f"--cover: tier must be one of {', '.join(PARTITIONED_TIERS)}")
            spans = {f: (float(start), float(end)) for f in families([tier])}
            made += ensure_between(django_runner(using), spans)
        self.stdout.write(f"{len(made)} partitions made")
        if opts["quiet"]:
            return
        for parent, name, lo, hi, rows, size in describe(using):
            estimate = "?" if rows < 0 else f"~{rows:,}"  # not analysed yet
            self.stdout.write(
                f"{parent:18} {name:32} {_when(lo):>16} → {_when(hi):16}"
                f" {estimate:>14} rows {size / 2**20:10.1f} MiB"
            )
