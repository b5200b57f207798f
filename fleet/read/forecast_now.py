"""A site's time-to-limit forecasts as the periodic task `fleet.forecasts` last stored them,
read by everything that shows or judges them: the rack page and its live pushes, the fleet
overview and the forecast alert rules (evaluated every 10 s).

A whole site's forecasts take seconds (3.8–5.4 s at 10,000 GPUs, bench/foresight.py), far more
than a live push (1 s, p95) or a rule pass may wait, so no reader computes them: the task
(`refresh_forecasts`, once a minute on the maintenance queue) stores each site's in
Django's cache (fleet/read/computed.py), and a read is one cache lookup. Forecasts are
fitted to 1-minute rollup means, so they cannot change more often than the task runs
(docs/forecast.md, "Cost").

A read finds nothing — no forecast shown, no rule value — before the first run, and when
the newest stored result is older than `STALE_S`: a stopped beat must not show forecasts
that no longer follow the data.

The same run records the database's size (fleet/storage/database_size.py) and stores its
disk's forecast (fleet/read/forecast_disk.py) for `disk_now`, alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.db import DEFAULT_DB_ALIAS, DatabaseError

from fleet.models import Site
from fleet.read import computed
from fleet.read.computed import CACHE, CACHE_S, STALE_S, clear
from fleet.read.forecast import Forecast
from fleet.read.forecast_disk import DiskState, disk_state
from fleet.read.forecast_sources import LimitForecast, sentence, site_forecasts
from fleet.storage import database_size

__all__ = (
    "CACHE",
    "CACHE_S",
    "STALE_S",
    "clear",
    "disk_now",
    "forecasts_now",
    "rack_sentences",
    "refresh_forecasts",
    "sentences",
)

log = logging.getLogger(__name__)

_KIND = "forecasts"
_DISK = "disk"  # the database's disk's key, beside the sites' ids


def _refresh_disk(minute: float, using: str) -> None:
    """Record this minute's database size and store its disk's forecast; a failure to
    measure is logged and leaves the sites' forecasts to be done."""
    try:
        measured = database_size.record(minute, using)
        computed.store(
            computed.key(_KIND, _DISK, using), minute, disk_state(minute, measured, using)
        )
    except (DatabaseError, OSError) as exc:
        log.warning("the database's size not recorded: %s", exc)


def refresh_forecasts(now: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """Compute every site's forecasts as of the start of `now`'s minute and store them for
    `forecasts_now`; the number of sites done. Each site is stored as soon as it is done,
    so a run cut short by its time limit still serves the sites it reached. The body of the
    task `fleet.forecasts`."""
    minute = computed.minute_of(now)
    _refresh_disk(minute, using)
    done = 0
    for site_id in Site.objects.using(using).order_by("pk").values_list("pk", flat=True):
        got = site_forecasts(site_id, minute, using=using)
        computed.store(computed.key(_KIND, site_id, using), minute, got)
        done += 1
    return done


def forecasts_now(site_id: int, now: float, using: str = DEFAULT_DB_ALIAS) -> list[LimitForecast]:
    """The site's forecasts as `refresh_forecasts` last stored them; [] where none are
    stored, the newest is stale or the store cannot be reached (`computed.fetch`). Never
    computes them."""
    got: list[LimitForecast] | None = computed.fetch(computed.key(_KIND, site_id, using), now)
    return [] if got is None else got


def disk_now(now: float, using: str = DEFAULT_DB_ALIAS) -> DiskState | None:
    """The database's disk as `refresh_forecasts` last stored it: its size, limit and
    forecast; None where none is stored, it is stale or the store cannot be reached. Never
    measures or computes."""
    got: DiskState | None = computed.fetch(computed.key(_KIND, _DISK, using), now)
    return got


def sentences(items: Iterable[LimitForecast]) -> list[tuple[LimitForecast, str]]:
    """Each item that has a forecast, with its words (`forecast_sources.sentence`)."""
    out = []
    for item in items:
        words = sentence(item)
        if words is not None:
            out.append((item, words))
    return out


def rack_sentences(site_id: int, now: float) -> dict[str, list[tuple[LimitForecast, str]]]:
    """By rack name, the forecasts of that rack and its feeds that have one."""
    out: dict[str, list[tuple[LimitForecast, str]]] = {}
    for item, words in sentences(forecasts_now(site_id, now)):
        if item.subject in ("rack", "feed") and isinstance(item.forecast, Forecast):
            out.setdefault(item.rack, []).append((item, words))
    return out
