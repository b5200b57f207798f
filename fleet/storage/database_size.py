"""The database's size and how large it may grow, measured and recorded once a minute by the
task `fleet.forecasts` (`DatabaseSize` rows), for its disk's time to limit
(fleet/read/forecast_disk.py; docs/forecast.md, "The database's disk").

- **Size**: SQLite, its file and its write-ahead log (`-wal`); an in-memory database (the
  test suite's), its pages. PostgreSQL, `pg_database_size(current_database())`.
- **Limit**: where the filesystem the database lives on can be seen from here (SQLite's
  file; PostgreSQL's `data_directory` when the server is on this host and lets it be read),
  the size plus that filesystem's free space: what the database reaches when the disk is
  full. Else `FLEETWATCH_DATABASE_DISK_GB`, the disk's size as configured. Else unknown.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction

from fleet.models import DatabaseSize

__all__ = ("KEEP_S", "Measure", "measure", "record", "series")

log = logging.getLogger(__name__)

# Rows kept: two days, more than the one day the forecast fits (forecast_disk.WINDOW_S).
KEEP_S = 2 * 86_400
_LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class Measure:
    size_bytes: int
    limit_bytes: int | None  # None: no disk size known
    limit_from: str  # "its filesystem", "FLEETWATCH_DATABASE_DISK_GB" or "" (unknown)


def measure(using: str = DEFAULT_DB_ALIAS) -> Measure:
    """The database's size now, and how large it may grow (see the module's docstring)."""
    conn = connections[using]
    if conn.vendor == "postgresql":
        size, directory = _postgresql(using)
    else:
        size, directory = _sqlite(using)
    if directory is not None:
        try:
            free = shutil.disk_usage(directory).free
        except OSError as exc:
            log.warning("the database's filesystem at %s not read: %s", directory, exc)
        else:
            return Measure(size, size + free, "its filesystem")
    configured = float(settings.DATABASE_DISK_GB)
    if configured > 0:
        return Measure(size, int(configured * 1e9), "FLEETWATCH_DATABASE_DISK_GB")
    return Measure(size, None, "")


def _sqlite(using: str) -> tuple[int, Path | None]:
    name = str(connections[using].settings_dict["NAME"])
    path = Path(name)
    if name == ":memory:" or "mode=memory" in name or not path.is_file():
        with connections[using].cursor() as cur:
            cur.execute("PRAGMA page_count")
            pages = int(cur.fetchone()[0])
            cur.execute("PRAGMA page_size")
            return pages * int(cur.fetchone()[0]), None
    wal = Path(f"{name}-wal")
    size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    return size, path.parent


def _postgresql(using: str) -> tuple[int, Path | None]:
    conn = connections[using]
    with conn.cursor() as cur:
        cur.execute("SELECT pg_database_size(current_database())")
        size = int(cur.fetchone()[0])
    host = str(conn.settings_dict.get("HOST") or "")
    if host not in _LOCAL_HOSTS and not host.startswith("/"):
        return size, None  # another host's disk: not this one's to measure
    try:
        # Superusers and pg_read_all_settings members only; anyone else: not known here.
        with transaction.atomic(using=using), conn.cursor() as cur:
            cur.execute("SHOW data_directory")
            directory = Path(str(cur.fetchone()[0]))
    except DatabaseError:
        return size, None
    return size, directory if os.path.isdir(directory) else None


def record(now: float, using: str = DEFAULT_DB_ALIAS) -> Measure:
    """Measure and keep this minute's row (again within a minute: the newer measure), and
    drop rows older than `KEEP_S`."""
    got = measure(using)
    minute = int(now // 60 * 60)
    rows = DatabaseSize.objects.using(using)
    rows.update_or_create(
        minute=minute, defaults={"size_bytes": got.size_bytes, "limit_bytes": got.limit_bytes}
    )
    rows.filter(minute__lt=minute - KEEP_S).delete()
    return got


def series(since: float, until: float, using: str = DEFAULT_DB_ALIAS) -> list[tuple[float, float]]:
    """(the minute, size in bytes) of each recorded minute in [since, until]: a size is
    measured at an instant, not averaged over a bucket, so it is stamped at its minute."""
    rows = DatabaseSize.objects.using(using).filter(minute__gte=since, minute__lte=until)
    return [(float(m), float(b)) for m, b in rows.values_list("minute", "size_bytes")]
