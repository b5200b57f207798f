"""A site's grid carbon intensity as an hourly time series (`GridIntensity`), imported from a
CSV the grid operator or a provider (Electricity Maps, WattTime, a national grid's API)
publishes: `start,gco2_per_kwh` per row, `start` an ISO 8601 time with its offset or epoch
seconds. Finer steps (5, 15 or 30 minutes) are averaged into their UTC hour. All or nothing:
a file with one bad row changes nothing and says which rows are wrong.

Importing also reprices the energy ledger's stored hours (fleet/storage/ledger.py
`apply_intensity`) in the same transaction, so the efficiency page and the weekly report
show the new carbon at once; the site's constant (`Site.grid_gco2_per_kwh`) covers the hours
without a value.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from fleet.models import Site
from fleet.models.sites import GridIntensity
from fleet.storage.ledger import apply_intensity

HOUR_S = 3600
COLUMNS = ("start", "gco2_per_kwh")
# Beyond any grid's: coal plants emit ~1,000 g/kWh; a larger value is a unit mistake (kg, lb).
MAX_GCO2_PER_KWH = 2000.0
MAX_PROBLEMS_SHOWN = 20


class IntensityError(ValueError):
    """The file's problems, one per line; nothing was imported."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        shown = problems[:MAX_PROBLEMS_SHOWN]
        more = len(problems) - len(shown)
        super().__init__("\n".join(shown + ([f"… and {more} more"] if more else [])))


@dataclass(frozen=True, slots=True)
class Imported:
    hours: int  # hours written (new or replaced)
    first: int  # the first hour's start, epoch seconds
    last: int  # the last hour's start


def parse_start(text: str) -> float:
    """Epoch seconds from epoch seconds or an ISO 8601 time with an offset (or `Z`)."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(value):
            return value
        raise ValueError(f"{text!r} is not a time")
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is neither epoch seconds nor an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset (write Z or +01:00)")
    return moment.timestamp()


def parse_rows(rows: Iterable[dict[str, str]]) -> dict[int, float]:
    """Hour start → mean gCO2/kWh of the rows in it; IntensityError with every bad row."""
    problems: list[str] = []
    by_hour: dict[int, list[float]] = {}
    for line, row in enumerate(rows, start=2):
        try:
            start = parse_start(row.get("start") or "")
            value = float(row.get("gco2_per_kwh") or "")
        except ValueError as exc:
            problems.append(f"row {line}: {exc}")
            continue
        if not math.isfinite(value) or not 0 <= value <= MAX_GCO2_PER_KWH:
            problems.append(f"row {line}: {value!r} gCO2/kWh is outside 0–{MAX_GCO2_PER_KWH:g}")
            continue
        by_hour.setdefault(int(start // HOUR_S) * HOUR_S, []).append(value)
    if problems:
        raise IntensityError(problems)
    if not by_hour:
        raise IntensityError(["no rows: the file needs a header `start,gco2_per_kwh` and rows"])
    return {hour: sum(values) / len(values) for hour, values in by_hour.items()}


def import_csv(site: Site, text: str, using: str = DEFAULT_DB_ALIAS) -> Imported:
    """The file's hours set for `site` (replacing values already there), and the stored
    ledger repriced, in one transaction."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise IntensityError([f"the header lacks {', '.join(missing)} (want: start,gco2_per_kwh)"])
    values = parse_rows(reader)
    with transaction.atomic(using=using):
        GridIntensity.objects.using(using).filter(site=site, hour__in=list(values)).delete()
        GridIntensity.objects.using(using).bulk_create(
            GridIntensity(site=site, hour=hour, gco2_per_kwh=value)
            for hour, value in sorted(values.items())
        )
        with connections[using].cursor() as cur:
            apply_intensity(cur, site.pk, values)
    return Imported(len(values), min(values), max(values))
