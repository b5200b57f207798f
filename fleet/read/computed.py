"""Results a periodic task computes once a minute and every process reads: a site's
time-to-limit forecasts (fleet/read/forecast_now.py), its GPUs' health states
(fleet/read/health_now.py). Each takes seconds for a large site, far more than a page, a
live push or a rule pass may wait, so readers never compute them: the task stores each
result in Django's cache, which every process of an installation shares
(fleetwatch/settings.py, CACHES), and a read is one cache lookup.

A read finds nothing (None) before the first run, when the newest result is more than
`STALE_S` older than the reader's `now` (a stopped beat must not serve results that no
longer follow the data), and when the cache cannot be reached (a Redis restart must not
fail a page or an evaluation).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from typing import Any

from django.core.cache import caches
from django.db import connections

__all__ = ("CACHE", "CACHE_S", "STALE_S", "clear", "fetch", "key", "minute_of", "store")

log = logging.getLogger(__name__)

CACHE_S = 60  # the 1-minute tier's bucket: what the results are fitted to moves no faster
# A result this much older than the reader's `now` is not served: three beats missed.
STALE_S = 180
CACHE = "default"  # the cache alias (fleetwatch/settings.py, CACHES)

# The keys this process stored, so `clear` forgets its own results and no other process's.
_lock = threading.Lock()
_written: set[str] = set()


def minute_of(now: float) -> float:
    """The start of `now`'s minute: what a run's results are as of."""
    return float(int(now // CACHE_S) * CACHE_S)


def _database(using: str) -> str:
    """Which database a result is of, named alike by every process that shares it: its
    engine, host, port and name; an in-memory SQLite database (the test suite's) is seen
    by its own process only, so its results are that process's alone."""
    conn = connections[using]
    conf = conn.settings_dict
    name = str(conf["NAME"])
    ident = f"{conf['ENGINE']}|{conf.get('HOST', '')}|{conf.get('PORT', '')}|{name}"
    if conn.vendor == "sqlite" and (name == ":memory:" or "mode=memory" in name):
        ident += f"|pid {os.getpid()}"
    return ident


def key(kind: str, part: int | str, using: str) -> str:
    """The cache key of one result: its kind ("forecasts"), of what (a site's id), of which
    database. Hashed: a file path or URL is no safe cache key (length, spaces)."""
    db = hashlib.sha256(_database(using).encode()).hexdigest()[:16]
    return f"{kind}:{db}:{part}"


def store(at: str, minute: float, value: object) -> None:
    """Keep `value`, as of `minute`, under the key `at`."""
    # Kept a little past STALE_S: a read checks the age itself, this only frees space.
    caches[CACHE].set(at, (minute, value), timeout=STALE_S + CACHE_S)
    with _lock:
        _written.add(at)


def fetch(at: str, now: float) -> Any | None:
    """The value stored under `at`, unless there is none, it is more than `STALE_S` older
    than `now`, or the cache cannot be reached (logged)."""
    try:
        held = caches[CACHE].get(at)
    except Exception as exc:  # the cache backend's own errors differ per backend
        log.warning("%s not read: the cache failed: %s", at, exc)
        return None
    if held is None:
        log.debug("nothing stored under %s (its task has not run)", at)
        return None
    minute, value = held
    if now - minute > STALE_S:
        log.debug("%s is %.0f s old: not served", at, now - minute)
        return None
    return value


def clear() -> None:
    """Forget every result this process stored (tests: one test's results must not answer
    for the next one's rows)."""
    with _lock:
        keys = list(_written)
        _written.clear()
    caches[CACHE].delete_many(keys)
