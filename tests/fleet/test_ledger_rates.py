"""The energy ledger's per-site choices, on the ledger's seeded site (tests/support/
ledger_seed.py: 300 gCO2/kWh, 0.2 EUR/kWh, 1.5 EUR per GPU-hour): carbon from an hourly
grid-intensity series where it has a value and the constant elsewhere, computed and stored
alike and repriced when a series arrives after the hours were stored; idle energy charged to
the job's owner or to the pool; a bad series file changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from fleet.grid_intensity import IntensityError, import_csv
from fleet.models import Site
from fleet.models.sites import GridIntensity, IdleEnergyTo
from fleet.read import ledger_rules as r
from fleet.read.ledger import Ledger, ledger
from fleet.read.ledger_rules import DEFAULT_RULES
from fleet.read.ledger_sql import Window
from fleet.read.ledger_store import stored_ledger
from tests.support.databases import T, TierDb, fresh_db
from tests.support.ledger_seed import Seed, kept, seed

A, B = T, T + 7200
LOOKBACK = DEFAULT_RULES.lookback_s
SERIES = "start,gco2_per_kwh\n{a},80\n{a30},120\n"  # two half-hours: 100 for the first hour


@pytest.fixture
def site(
    tier: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, django_db_blocker: Any
) -> Iterator[tuple[TierDb, Seed]]:
    with fresh_db(tier, tmp_path, tmp_path_factory, django_db_blocker) as tdb:
        yield tdb, seed(tdb.alias, T)


def series_text() -> str:
    return SERIES.format(a=A, a30=A + 1800)


def window(s: Seed) -> Window:
    return Window(s.site_id, A, B, "1m")


def kwh_per_hour(tdb: TierDb, s: Seed) -> tuple[float, float]:
    first = ledger(Window(s.site_id, A, A + 3600, "1m"), using=tdb.alias)
    second = ledger(Window(s.site_id, A + 3600, B, "1m"), using=tdb.alias)
    return first.total_kwh, second.total_kwh


def test_carbon_takes_the_series_where_it_has_a_value_and_the_constant_elsewhere(
    site: tuple[TierDb, Seed],
) -> None:
    tdb, s = site
    first, second = kwh_per_hour(tdb, s)
    import_csv(Site.objects.using(tdb.alias).get(pk=s.site_id), series_text(), tdb.alias)
    want = (first * 100.0 + second * 300.0) / 1000  # the half-hours averaged: 100
    computed = ledger(window(s), using=tdb.alias)
    assert computed.price.carbon_kg == pytest.approx(want, rel=1e-9)
    kept(tdb.alias, minutes=B + LOOKBACK, hours=B, now=B + LOOKBACK + 60)
    assert stored_ledger(Window(s.site_id, A, B), tdb.alias).price.carbon_kg == pytest.approx(
        want, rel=1e-9
    )


def test_a_series_imported_after_the_hours_were_stored_reprices_them(
    site: tuple[TierDb, Seed],
) -> None:
    tdb, s = site
    kept(tdb.alias, minutes=B + LOOKBACK, hours=B, now=B + LOOKBACK + 60)
    before = stored_ledger(Window(s.site_id, A, B), tdb.alias)
    first, second = kwh_per_hour(tdb, s)
    assert before.price.carbon_kg == pytest.approx((first + second) * 0.3, rel=1e-9)
    import_csv(Site.objects.using(tdb.alias).get(pk=s.site_id), series_text(), tdb.alias)
    after = stored_ledger(Window(s.site_id, A, B), tdb.alias)
    assert after.price.carbon_kg == pytest.approx((first * 100 + second * 300) / 1000, rel=1e-9)
    # the day's rows were summed again too
    hourly, daily = (
        query(tdb, f"SELECT SUM(series_g), SUM(series_j) FROM {table}")
        for table in ("fw_ledger_1h", "fw_ledger_1d")
    )
    assert hourly[0] > 0
    assert daily == pytest.approx(hourly, rel=1e-9)


def query(tdb: TierDb, sql: str) -> tuple[float, ...]:
    with connections[tdb.alias].cursor() as cur:
        cur.execute(sql)
        return tuple(float(v) for v in cur.fetchone())


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("when,g\n1,2\n", "the header lacks start, gco2_per_kwh"),
        ("start,gco2_per_kwh\n2026-03-01T10:00,100\n", "has no UTC offset"),
        ("start,gco2_per_kwh\n2026-03-01T10:00Z,-5\n", "outside 0–2000"),
        ("start,gco2_per_kwh\nyesterday,100\n", "neither epoch seconds nor an ISO 8601 time"),
    ],
)
def test_a_bad_series_file_imports_nothing_and_says_why(
    site: tuple[TierDb, Seed], text: str, said: str
) -> None:
    tdb, s = site
    good_row = f"{A},100\n"  # one good row beside the bad one: still nothing
    with pytest.raises(IntensityError, match=said):
        import_csv(Site.objects.using(tdb.alias).get(pk=s.site_id), text + good_row, tdb.alias)
    assert GridIntensity.objects.using(tdb.alias).count() == 0


def job(led: Ledger, s: Seed, name: str) -> Any:
    (found,) = [j for j in led.jobs if j.workload_id == s.names[name]]
    return found


def test_idle_energy_goes_to_the_owner_or_to_the_pool_as_the_site_chooses(
    site: tuple[TierDb, Seed],
) -> None:
    tdb, s = site
    owner = ledger(window(s), using=tdb.alias)
    Site.objects.using(tdb.alias).filter(pk=s.site_id).update(idle_energy_to=IdleEnergyTo.POOL)
    pool = ledger(window(s), using=tdb.alias)
    idle_kwh = sum(owner.states[st].energy.total_kwh for st in r.IDLE_STATES)
    assert idle_kwh > 0
    assert pool.attributed.energy.total_kwh == pytest.approx(
        owner.attributed.energy.total_kwh - idle_kwh
    )
    assert pool.pool.total_kwh == pytest.approx(owner.pool.total_kwh + idle_kwh)
    assert pool.total_kwh == pytest.approx(owner.total_kwh)  # nothing lost, nothing twice
    # the empty allocation now pays only its GPU-hours (2 h × 1.5 EUR), no energy
    assert job(owner, s, "empty").price.cost > 3.0
    assert job(pool, s, "empty").price.cost == pytest.approx(3.0)
    assert job(pool, s, "empty").price.carbon_kg == pytest.approx(0.0)
    # a busy job pays the same either way
    assert job(pool, s, "train").price.cost == pytest.approx(job(owner, s, "train").price.cost)


def test_the_stored_ledger_follows_the_sites_choice_too(site: tuple[TierDb, Seed]) -> None:
    tdb, s = site
    kept(tdb.alias, minutes=B + LOOKBACK, hours=B, now=B + LOOKBACK + 60)
    Site.objects.using(tdb.alias).filter(pk=s.site_id).update(idle_energy_to=IdleEnergyTo.POOL)
    stored = stored_ledger(Window(s.site_id, A, B), tdb.alias)
    assert job(stored, s, "empty").price.cost == pytest.approx(3.0)
    assert stored.pool.total_kwh > stored.states[r.ALLOCATED_IDLE].energy.total_kwh
