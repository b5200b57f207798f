"""`manage.py pull_prometheus [--since 1h] [--step 15s] [--source NAME]`: pull now, or
backfill a bounded time range from each enabled Prometheus source."""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fleet.ingest.prometheus.pull import backfill, pull_source
from fleet.models import PrometheusSource

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """`90s`, `15m`, `1h`, `2d` (or plain seconds) → seconds."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 15m, 1h")
    return float(found[1]) * _UNITS[found[2] or "s"]


class Command(BaseCommand):
    help = "Pull dcgm-exporter series from the enabled Prometheus sources (now, or --since)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--since", type=duration, help="backfill this far back, e.g. 1h")
        parser.add_argument("--step", type=duration, default=15.0, help="backfill step (15s)")
        parser.add_argument("--source", help="only this source (by name)")

    def handle(self, *args: Any, **opts: Any) -> None:
        sources = PrometheusSource.objects.filter(enabled=True)
        if opts["source"]:
            sources = sources.filter(name=opts["source"])
        if not sources:
            raise CommandError("no enabled Prometheus source matches")
        now = time.time()
        for source in sources:
            try:
                if opts["since"] is None:
                    result = pull_source(source, now)
                else:
                    result = backfill(source, now - opts["since"], now, opts["step"])
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
            line = " ".join(f"{k}={v}" for k, v in result.items())
            self.stdout.write(f"{source.name}: {line}")
