"""The database's disk rule through the engine (docs/rules.md, "Time to limit"): a database
whose size grows to fill its disk within 12 hours fires `database-disk-forecast` for every
site (one database serves them all) with the crossing in its message; one that holds its
size never fires. The sizes are the rows the task fleet.forecasts records each minute;
`measure` stands in for the disk (the test suite's database is in memory)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleet.alerts.engine import evaluate
from fleet.alerts.models import AlertInstance, AlertRule
from fleet.demo import DEMO_RACKS, seed_demo_site
from fleet.models import DatabaseSize, Site
from fleet.read import forecast_now
from fleet.storage import database_size
from fleet.storage.database_size import Measure
from fleet.words import utc_minute
from tests.support import forecast_rows
from tests.support.alert_engine import T0

pytestmark = pytest.mark.django_db

START = int(T0 // 60 * 60)
GB, HOUR = 10**9, 3600

fresh_forecasts = forecast_rows.fresh_forecasts  # autouse


@pytest.fixture
def sites() -> None:
    """Two sites, only the disk rule enabled."""
    seed_demo_site("one", tuple(replace(p, nodes=1) for p in DEMO_RACKS[:1]), gpus_per_node=1)
    seed_demo_site("two", tuple(replace(p, nodes=1) for p in DEMO_RACKS[1:2]), gpus_per_node=1)
    AlertRule.objects.exclude(key="database-disk-forecast").update(enabled=False)


def database_grows(monkeypatch: pytest.MonkeyPatch, per_h_gb: float) -> None:
    """A day of sizes a minute apart, 490 GB at START on a 500 GB disk; the measure of
    each later minute continues the line."""

    def size(minute: float) -> int:
        return int(490 * GB + per_h_gb * GB * (minute - START) / HOUR)

    DatabaseSize.objects.bulk_create(
        DatabaseSize(minute=m, size_bytes=size(m), limit_bytes=500 * GB)
        for m in range(START - 24 * HOUR, START, 60)
    )
    clock = {"now": START}

    def measured(using: str = "default") -> Measure:
        return Measure(size(clock["now"]), 500 * GB, "its filesystem")

    monkeypatch.setattr(database_size, "measure", measured)

    def tick(k: int) -> None:
        at = START + 1 + 10 * k
        clock["now"] = at // 60 * 60
        if k % 6 == 0:
            forecast_now.refresh_forecasts(at)
        evaluate(at)

    for k in range(8):
        tick(k)


def test_a_database_filling_its_disk_fires_for_every_site(
    sites: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    database_grows(monkeypatch, 2.0)  # 10 GB left at 2 GB an hour: full in 5 hours

    firing = AlertInstance.objects.filter(rule__key="database-disk-forecast", state="firing")

    assert sorted(i.entity for i in firing) == sorted(
        str(pk) for pk in Site.objects.values_list("pk", flat=True)
    )
    crossing = firing[0].labels["crossing"]
    assert crossing in {utc_minute(START + 5 * HOUR + d * 60) for d in range(-30, 31)}
    assert firing[0].labels["forecast"].startswith("The database fills its disk (500 GB) in ~")


def test_a_database_that_holds_its_size_never_fires(
    sites: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    database_grows(monkeypatch, 0.0)

    assert not AlertInstance.objects.exists()
