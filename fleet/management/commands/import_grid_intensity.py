"""`manage.py import_grid_intensity --site SLUG FILE`: a site's hourly grid carbon intensity
from a CSV (`start,gco2_per_kwh`), all or nothing (fleet/grid_intensity.py)."""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fleet.grid_intensity import IntensityError, import_csv
from fleet.models import Site


class Command(BaseCommand):
    help = (
        "Set a site's grid carbon intensity per UTC hour from a CSV with a header"
        " `start,gco2_per_kwh` (start: ISO 8601 with an offset, or epoch seconds; finer steps"
        " are averaged per hour). Nothing changes unless every row is valid; the energy"
        " ledger's stored hours are repriced (docs/ledger.md)."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--site", required=True, help="the site's slug")
        parser.add_argument("file", type=Path)

    def handle(self, *args: Any, **opts: Any) -> None:
        path: Path = opts["file"]
        site = Site.objects.filter(slug=opts["site"]).first()
        if site is None:
            raise CommandError(f"no site with slug {opts['site']!r}: nothing imported")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path}: cannot read it ({exc}): nothing imported") from exc
        try:
            done = import_csv(site, text)
        except IntensityError as exc:
            raise CommandError(f"{path}: nothing imported:\n{exc}") from exc
        first, last = (
            dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:00 UTC")
            for t in (done.first, done.last)
        )
        self.stdout.write(f"{path}: {done.hours} hours for {site.slug}, {first} – {last}")
