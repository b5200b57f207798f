"""A site's time-to-limit forecasts as of this minute, computed once a minute per process
and shared by everything that shows or judges them: the rack page and its live pushes,
the fleet overview and the forecast alert rules (evaluated every 10 s).

Forecasts are fitted to 1-minute rollup means, so they cannot change more often than once
a minute: a second reading within the same minute returns the first one's result (docs/
forecast.md, "Cost"). The store keeps one minute per site (the newest asked for), so it
never grows past the number of sites.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from django.db import DEFAULT_DB_ALIAS

from fleet.read.forecast import Forecast
from fleet.read.forecast_sources import LimitForecast, sentence, site_forecasts

__all__ = ("CACHE_S", "clear", "forecasts_now", "rack_sentences", "sentences")

CACHE_S = 60  # the 1-minute tier's bucket: the series behind a forecast moves no faster

_lock = threading.Lock()
_store: dict[tuple[str, int], tuple[int, list[LimitForecast]]] = {}


def forecasts_now(site_id: int, now: float, using: str = DEFAULT_DB_ALIAS) -> list[LimitForecast]:
    """`site_forecasts(site_id, …)` as of the start of `now`'s minute, computed at most
    once per minute per site in this process."""
    minute = int(now // CACHE_S)
    key = (using, site_id)
    with _lock:
        held = _store.get(key)
    if held is not None and held[0] == minute:
        return held[1]
    # Computed outside the lock: two threads missing together compute twice, never wait.
    got = site_forecasts(site_id, float(minute * CACHE_S), using=using)
    with _lock:
        _store[key] = (minute, got)
    return got


def clear() -> None:
    """Forget every stored minute (tests; a fresh process starts empty)."""
    with _lock:
        _store.clear()


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
