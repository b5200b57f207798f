"""A site's time-to-limit forecasts as the periodic task `fleet.forecasts` last stored them,
read by everything that shows or judges them: the rack page and its live pushes, the fleet
overview and the forecast alert rules (evaluated every 10 s).

A whole site's forecasts take seconds (3.8–5.4 s at 10,000 GPUs, bench/foresight.py), far more
than a live push (1 s, p95) or a rule pass may wait, so no reader computes them: the task
(`refresh_forecasts`, once a minute on the maintenance queue) stores each site's in
Django's cache, which every process of an installation shares (fleetwatch/settings.py,
CACHES), and a read is one cache lookup. Forecasts are fitted to 1-minute rollup means, so
they cannot change more often than the task runs (docs/forecast.md, "Cost").

A read finds nothing — no forecast shown, no rule value — before the first run, and when
the newest stored result is older than `STALE_S`: a stopped beat must not show forecasts
that no longer follow the data.

The same run records the database's size (fleet/storage/database_size.py) and stores its
disk's forecast (fleet/read/forecast_disk.py) for `disk_now`, alike.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Iterable

from django.core.cache import caches
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from fleet.models import Site
from fleet.read.forecast import Forecast
from fleet.read.forecast_disk import DiskState, disk_state
from fleet.read.forecast_sources import LimitForecast, sentence, site_forecasts
from fleet.storage import database_size

__all__ = (
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

CACHE_S = 60  # the 1-minute tier's bucket: the series behind a forecast moves no faster
# A result this much older than the reader's `now` is not served: three beats missed.
STALE_S = 180
CACHE = "default"  # the cache alias (fleetwatch/settings.py, CACHES)

Stored = tuple[float, list[LimitForecast]]  # (the minute they are as of, the forecasts)

# The keys this process stored, so `clear` forgets its own results and no other process's.
_lock = threading.Lock()
_written: set[str] = set()


def _database(using: str) -> str:
    """Which database the forecasts are of, named alike by every process that shares it:
    its engine, host, port and name; an in-memory SQLite database (the test suite's) is
    seen by its own process only, so its results are that process's alone."""
    conn = connections[using]
    conf = conn.settings_dict
    name = str(conf["NAME"])
    ident = f"{conf['ENGINE']}|{conf.get('HOST', '')}|{conf.get('PORT', '')}|{name}"
    if conn.vendor == "sqlite" and (name == ":memory:" or "mode=memory" in name):
        ident += f"|pid {os.getpid()}"
    return ident


def _key(site_id: int | str, using: str) -> str:
    # Hashed: a file path or URL is no safe cache key (length, spaces).
    db = hashlib.sha256(_database(using).encode()).hexdigest()[:16]
    return f"forecasts:{db}:{site_id}"


_DISK = "disk"  # the database's disk's key, beside the sites' ids


def _store(key: str, value: object) -> None:
    # Kept a little past STALE_S: a read checks the age itself, this only frees space.
    caches[CACHE].set(key, value, timeout=STALE_S + CACHE_S)
    with _lock:
        _written.add(key)


def _refresh_disk(minute: float, using: str) -> None:
    """Record this minute's database size and store its disk's forecast; a failure to
    measure is logged and leaves the sites' forecasts to be done."""
    try:
        measured = database_size.record(minute, using)
        _store(_key(_DISK, using), (minute, disk_state(minute, measured, using)))
    except (DatabaseError, OSError) as exc:
        log.warning("the database's size not recorded: %s", exc)


def refresh_forecasts(now: float, using: str = DEFAULT_DB_ALIAS) -> int:
    """Compute every site's forecasts as of the start of `now`'s minute and store them for
    `forecasts_now`; the number of sites done. Each site is stored as soon as it is done,
    so a run cut short by its time limit still serves the sites it reached. The body of the
    task `fleet.forecasts`."""
    minute = float(int(now // CACHE_S) * CACHE_S)
    _refresh_disk(minute, using)
    done = 0
    for site_id in Site.objects.using(using).order_by("pk").values_list("pk", flat=True):
        stored: Stored = (minute, site_forecasts(site_id, minute, using=using))
        _store(_key(site_id, using), stored)
        done += 1
    return done


def forecasts_now(site_id: int, now: float, using: str = DEFAULT_DB_ALIAS) -> list[LimitForecast]:
    """The site's forecasts as `refresh_forecasts` last stored them; [] where none are
    stored or the newest is more than `STALE_S` older than `now`, or the store cannot be
    reached (a Redis restart must not fail the rack page or an evaluation). Never computes
    them."""
    try:
        held: Stored | None = caches[CACHE].get(_key(site_id, using))
    except Exception as exc:  # the cache backend's own errors differ per backend
        log.warning("forecasts of site %s not read: the cache failed: %s", site_id, exc)
        return []
    if held is None:
        log.debug("no forecasts stored for site %s (fleet.forecasts has not run)", site_id)
        return []
    minute, got = held
    if now - minute > STALE_S:
        log.debug("forecasts of site %s are %.0f s old: not served", site_id, now - minute)
        return []
    return got


def disk_now(now: float, using: str = DEFAULT_DB_ALIAS) -> DiskState | None:
    """The database's disk as `refresh_forecasts` last stored it: its size, limit and
    forecast; None where none is stored, the newest is more than `STALE_S` older than
    `now`, or the store cannot be reached. Never measures or computes."""
    try:
        held: tuple[float, DiskState] | None = caches[CACHE].get(_key(_DISK, using))
    except Exception as exc:  # the cache backend's own errors differ per backend
        log.warning("the database's disk not read: the cache failed: %s", exc)
        return None
    if held is None or now - held[0] > STALE_S:
        return None
    return held[1]


def clear() -> None:
    """Forget every result this process stored (tests: one test's forecasts must not
    answer for the next one's rows)."""
    with _lock:
        keys = list(_written)
        _written.clear()
    caches[CACHE].delete_many(keys)


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
