"""Time to limit for the database's disk: the database's size, as the task `fleet.forecasts`
records it once a minute (fleet/storage/database_size.py), against how large it may grow
(its size plus its filesystem's free space, else `FLEETWATCH_DATABASE_DISK_GB`), fitted by
`fleet.read.forecast.time_to_limit` with the method's own parameters but for the window:
the last `WINDOW_S` (a day) of minutes, so the horizon is a day ahead — a database grows
over days, and a warning an hour before the disk is full is too late to add one. No daily
pattern: the day's rhythm is inside the window. No limit known: no forecast, and the page
says why (docs/forecast.md, "The database's disk")."""

from __future__ import annotations

from dataclasses import dataclass, replace

from django.db import DEFAULT_DB_ALIAS

from fleet.read.forecast import PARAMS, Forecast, ForecastParams, Reason, time_to_limit
from fleet.read.forecast_sources import LimitForecast, interval_words, sentence
from fleet.storage.database_size import Measure, series

__all__ = (
    "DISK_PARAMS",
    "NAME",
    "NO_LIMIT",
    "WINDOW_S",
    "DiskState",
    "disk_state",
    "disk_words",
    "gb",
)

WINDOW_S = 86_400.0
DISK_PARAMS: ForecastParams = replace(PARAMS, recent_s=WINDOW_S)
NAME = "The database"  # the subject's name in its sentence


@dataclass(frozen=True)
class DiskState:
    """The database's size now, its limit and where it came from, and its forecast (None
    where no limit is known)."""

    size_bytes: int
    limit_bytes: int | None
    limit_from: str
    forecast: LimitForecast | None


NO_LIMIT = "no forecast: the size of its disk is not known here (FLEETWATCH_DATABASE_DISK_GB)"


def disk_words(state: DiskState) -> tuple[str, str]:
    """The page's words for the database's disk ("3.2 GB of 500 GB (its filesystem); The
    database fills its disk (500 GB) in ~5.2 h at this trend") and the interval's (or "").
    The one owner of these words."""
    size = f"{gb(state.size_bytes):.1f} GB"
    if state.limit_bytes is None or state.forecast is None:
        return f"{size}; {NO_LIMIT}", ""
    head = f"{size} of {gb(state.limit_bytes):.1f} GB ({state.limit_from})"
    fitted = state.forecast.forecast
    if isinstance(fitted, Forecast):
        return f"{head}; {sentence(state.forecast)}", interval_words(state.forecast) or ""
    if fitted.reason == Reason.TOO_SHORT:
        return f"{head}; no forecast yet: too few minutes recorded", ""
    if fitted.reason == Reason.ALREADY_OVER:
        return f"{head}; its disk is full", ""
    return f"{head}; not forecast to fill its disk within a day", ""


def gb(size_bytes: float) -> float:
    """Bytes as GB (decimal, as disks are sold)."""
    return size_bytes / 1e9


def disk_state(now: float, measured: Measure, using: str = DEFAULT_DB_ALIAS) -> DiskState:
    """The database's disk as of `now`: the series of the last `WINDOW_S` recorded, fitted
    against the limit `measured` just now."""
    limit = measured.limit_bytes
    if limit is None or limit <= 0:
        return DiskState(measured.size_bytes, None, "", None)
    points = [(t, gb(v)) for t, v in series(now - WINDOW_S, now, using)]
    fitted = time_to_limit(points, gb(limit), now, params=DISK_PARAMS)
    item = LimitForecast("disk", 0, NAME, "", gb(limit), "GB", fitted)
    return DiskState(measured.size_bytes, limit, measured.limit_from, item)
