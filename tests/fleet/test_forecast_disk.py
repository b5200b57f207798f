"""The database's disk (fleet/storage/database_size.py, fleet/read/forecast_disk.py): its size
measured on both tiers (SQLite: the file and its WAL; PostgreSQL: pg_database_size) against
the filesystem it lives on, else the configured disk size, else no limit and no forecast,
said as such; recorded once a minute by the forecasts task, two days kept; a size growing
towards its limit is forecast within 10 % of the crossing, a flat one is not."""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from fleet.models import DatabaseSize
from fleet.read import forecast_now
from fleet.read.forecast import Forecast, NoForecast, Reason
from fleet.read.forecast_disk import NO_LIMIT, disk_state, disk_words
from fleet.storage import database_size
from fleet.storage.database_size import Measure
from tests.support import databases, forecast_rows, pages, people
from tests.support.databases import T, TierDb
from tests.support.pages import fold

MINUTE, HOUR = 60, 3600
GB = 1e9

db = databases.fresh_tier_db  # each test's own database, both tiers
fresh_forecasts = forecast_rows.fresh_forecasts  # autouse
fast_passwords = people.fast_passwords  # autouse


def test_the_size_is_the_databases_own_and_the_limit_its_filesystems(db: TierDb) -> None:
    got = database_size.measure(db.alias)

    if db.vendor == "sqlite":
        file = db.var_dir / databases.DB_FILE
        wal = Path(f"{file}-wal")
        assert got.size_bytes == file.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
        free = shutil.disk_usage(file.parent).free
        assert got.limit_from == "its filesystem"
        assert got.limit_bytes is not None
        assert abs(got.limit_bytes - (got.size_bytes + free)) < 0.01 * free
    else:
        (size,) = db.execute("SELECT pg_database_size(current_database())")[0]
        assert abs(got.size_bytes - size) < 0.05 * size
        # a superuser on this host sees its data directory; else the setting (unset here)
        assert got.limit_from in ("its filesystem", "")


def test_without_a_filesystem_the_setting_is_the_limit_and_without_it_none(
    settings: Any, monkeypatch: pytest.MonkeyPatch, db: TierDb
) -> None:
    def unreadable(path: object) -> None:
        raise FileNotFoundError(path)

    monkeypatch.setattr(shutil, "disk_usage", unreadable)
    settings.DATABASE_DISK_GB = 500
    got = database_size.measure(db.alias)
    assert (got.limit_bytes, got.limit_from) == (500 * 10**9, "FLEETWATCH_DATABASE_DISK_GB")

    settings.DATABASE_DISK_GB = 0
    got = database_size.measure(db.alias)
    assert got.limit_bytes is None
    state = disk_state(T, got, db.alias)
    assert state.forecast is None
    assert NO_LIMIT in disk_words(state)[0]


def seed_sizes(db: TierDb, start_gb: float, per_h_gb: float, hours: float, sd_gb: float) -> None:
    """One size per minute over the `hours` before T (T's own minute included)."""
    rng = random.Random(3)
    minutes = range(T - int(hours * HOUR), T + 1, MINUTE)
    DatabaseSize.objects.using(db.alias).bulk_create(
        DatabaseSize(
            minute=m,
            size_bytes=int(GB * (start_gb + per_h_gb * (m - T) / HOUR + rng.gauss(0, sd_gb))),
            limit_bytes=None,
        )
        for m in minutes
    )


def test_a_growing_database_is_forecast_to_fill_its_disk(db: TierDb) -> None:
    # 480 GB now, 4 GB an hour: its 500 GB disk is full in 5 hours
    seed_sizes(db, 480, 4, 24, 0.05)

    state = disk_state(T, Measure(int(480 * GB), int(500 * GB), "its filesystem"), db.alias)

    assert state.forecast is not None
    fitted = state.forecast.forecast
    assert isinstance(fitted, Forecast)
    assert abs(fitted.crossing_at - (T + 5 * HOUR)) <= 0.1 * 5 * HOUR
    words, interval = disk_words(state)
    assert words.startswith("480.0 GB of 500.0 GB (its filesystem); The database fills its disk")
    assert "(500 GB) in ~5.0 h at this trend" in words and "90 % interval" in interval


def test_a_database_that_holds_its_size_is_not_forecast(db: TierDb) -> None:
    seed_sizes(db, 480, 0, 24, 0.05)

    state = disk_state(T, Measure(int(480 * GB), int(500 * GB), "its filesystem"), db.alias)

    assert state.forecast is not None and not state.forecast.forecast
    assert disk_words(state)[0].endswith("not forecast to fill its disk within a day")


def test_the_task_records_a_size_a_minute_and_keeps_two_days(db: TierDb) -> None:
    old = T - database_size.KEEP_S - HOUR
    DatabaseSize.objects.using(db.alias).create(minute=old, size_bytes=1, limit_bytes=None)

    forecast_now.refresh_forecasts(T + 5, using=db.alias)
    forecast_now.refresh_forecasts(T + 35, using=db.alias)  # the same minute: one row

    rows = list(DatabaseSize.objects.using(db.alias).values_list("minute", "size_bytes"))
    assert [m for m, _ in rows] == [T]
    # the newer measure of the minute (the rows written since grew the file a little)
    assert abs(rows[0][1] - database_size.measure(db.alias).size_bytes) < 0.05 * rows[0][1]
    stored = forecast_now.disk_now(T + 40, using=db.alias)
    assert stored is not None and stored.forecast is not None
    assert stored.forecast.forecast == NoForecast(Reason.TOO_SHORT)
    assert forecast_now.disk_now(T + forecast_now.STALE_S + 1, using=db.alias) is None


site = pages.rack_site
client = people.ops_signed_in


@pytest.mark.django_db
def test_the_fleet_overview_says_the_databases_disk(client: Client, settings: Any) -> None:
    """The test suite's database is in memory: no filesystem, so the setting is the limit."""
    settings.DATABASE_DISK_GB = 0
    forecast_now.refresh_forecasts(time.time())
    page = fold(client.get("/").content.decode())
    assert "Database: " in page and NO_LIMIT in page
